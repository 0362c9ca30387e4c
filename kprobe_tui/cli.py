"""The ``kprobe-tui`` command: no subcommand opens the TUI, subcommands run the same cores headless."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from kprobe_tui import __version__
from kprobe_tui.errors import UserError

# Each name is a module in kprobe_tui.commands with ``add_parser(subparsers)`` and ``run(args) -> int``.
COMMANDS = ["funcs", "doctor", "snapshot", "lines", "vars", "tail", "probe", "list", "delete", "cleanup"]


def add_source_options(parser: argparse.ArgumentParser) -> None:
    """Options that point every kernel reader at captured copies instead of the live kernel."""
    group = parser.add_argument_group("offline kernel data")
    group.add_argument("--snapshot", metavar="FILE", help="read a kprobe-tui snapshot archive (read-only)")
    group.add_argument("--tracefs", metavar="DIR", help="tracefs directory to read instead of the live one")
    group.add_argument("--debugfs", metavar="DIR", help="debugfs directory (for kprobes/blacklist)")
    group.add_argument("--kallsyms", metavar="FILE", help="kallsyms file instead of /proc/kallsyms")
    group.add_argument("--btf", metavar="FILE", help="BTF file of vmlinux (module BTF is read beside it)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kprobe-tui",
        description="Explore and use Linux dynamic probes. With no command, opens the terminal UI.",
    )
    parser.add_argument("--version", action="version", version=f"kprobe-tui {__version__}")
    parser.add_argument("-x", "--exec", dest="exec_binary", metavar="BINARY",
                        help="browse and probe the functions of this program or library (uprobes) instead of the kernel")
    parser.add_argument("-k", "--vmlinux", dest="tui_vmlinux", metavar="VMLINUX",
                        help="kernel debug info for the source view (default: found for the running kernel)")
    parser.add_argument("-s", "--source", dest="tui_source", metavar="DIR", help="prefix for source file paths")
    add_source_options(parser)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"kprobe_tui.commands.{name}").add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command is None:
            # Textual repaints one frame period after a change: at its default 60 fps that alone is
            # 16.7 ms, a whole keystroke's budget when filtering 100k names as you type.
            os.environ.setdefault("TEXTUAL_FPS", "120")
            from kprobe_tui.tui.app import run_app

            return run_app(args)
        return args.run(args)
    except UserError as exc:
        print(f"kprobe-tui: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:
        if os.environ.get("KPROBE_TUI_DEBUG"):
            raise
        print(
            f"kprobe-tui: internal error: {type(exc).__name__}: {exc}\n"
            "  hint: this is a bug in kprobe-tui; rerun with KPROBE_TUI_DEBUG=1 for the traceback and report it",
            file=sys.stderr,
        )
        return 70
