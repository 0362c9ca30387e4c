"""``kprobe-tui lines``: probeable source lines of a function, printed as `perf probe -L`."""

from __future__ import annotations

import argparse
import sys

from kprobe_tui.textsafe import printable


def add_debuginfo_options(parser: argparse.ArgumentParser) -> None:
    """-x/-k/-m/-s, shared by lines and vars (perf probe's spelling)."""
    target = parser.add_mutually_exclusive_group()
    target.add_argument("-x", "--exec", dest="binary", metavar="BINARY", help="a user program or shared library")
    target.add_argument("-k", "--vmlinux", metavar="VMLINUX", help="a kernel image with debug info")
    target.add_argument("-m", "--module", metavar="MODULE", help="a loaded kernel module's name, or a module file")
    parser.add_argument("-s", "--source", dest="source_dir", metavar="DIR", help="prefix for source file paths")


def open_target(args: argparse.Namespace):
    """The debug info -x/-k/-m/-s name (or the running kernel's), telling on stderr where it was found.

    Debug info or source text not on disk comes from debuginfod (DEBUGINFOD_URLS), with progress on a terminal."""
    from kprobe_tui.debuginfo.scope import open_debuginfo  # only lines, vars and probe need it

    info = open_debuginfo(binary=args.binary, vmlinux=args.vmlinux, module=args.module,
                          source_dir=args.source_dir, debuginfod=stderr_client)
    if info.located.note:
        print(f"kprobe-tui: note: {info.located.note}", file=sys.stderr)
    return info


def stderr_client():
    """The debuginfod client, made only when the files on disk fall short (a warm run never imports it)."""
    from kprobe_tui.commands import progress

    return progress.client()


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "lines", help="probeable source lines of a function (as perf probe -L)",
        description="Show a function's source with its probeable lines numbered relative to its first line.",
    )
    add_debuginfo_options(parser)
    parser.add_argument("spec", metavar="SPEC", help="FUNC, FUNC:START-END, FUNC:START+N, FUNC@FILE or FILE:START-END")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from kprobe_tui.debuginfo.lines import LineSpec, find_line_range, render

    spec = LineSpec.parse(args.spec)
    info = open_target(args)
    text, note = render(info, find_line_range(info, spec))
    sys.stdout.write(printable(text, keep="\n\t"))  # source text is the file's, not ours
    sys.stdout.flush()
    if note:
        print(f"kprobe-tui: note: {note}", file=sys.stderr)
    return 0
