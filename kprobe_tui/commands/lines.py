"""``kprobe-tui lines``: probeable source lines of a function, printed as `perf probe -L`."""

from __future__ import annotations

import argparse
import sys

from kprobe_tui.textsafe import printable

# The debug info to read: a program's (-x), the kernel's (-k, or found), a module's (-m); -s: where the source is.
OPTIONS = frozenset({"binary", "vmlinux", "module", "source_dir"})


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
    from kprobe_tui.commands import progress  # here: progress costs ~22 ms to import (-X importtime)

    return progress.client()


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "lines", help="probeable source lines of a function (as perf probe -L)",
        description="Show a function's source with its probeable lines numbered relative to its first line.",
    )
    parser.add_argument("spec", metavar="SPEC", help="FUNC, FUNC:START-END, FUNC:START+N, FUNC@FILE or FILE:START-END")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    # here: ~21 ms to import (-X importtime); vars and probe import this module for open_target
    from kprobe_tui.debuginfo.lines import LineSpec, find_line_range, render

    spec = LineSpec.parse(args.spec)
    info = open_target(args)
    text, note = render(info, find_line_range(info, spec))
    sys.stdout.write(printable(text, keep="\n\t"))  # source text is the file's, not ours
    sys.stdout.flush()
    if note:
        print(f"kprobe-tui: note: {note}", file=sys.stderr)
    return 0
