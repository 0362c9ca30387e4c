"""The ``kprobe-tui`` command: no subcommand opens the TUI, subcommands run the same cores headless."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from kprobe_tui import __version__, config
from kprobe_tui.errors import UserError
from kprobe_tui.textsafe import PrintableStream, printable

# Each name is a module in kprobe_tui.commands with ``add_parser(subparsers)`` and ``run(args) -> int``.
COMMANDS = ["funcs", "doctor", "snapshot", "lines", "vars", "tail", "count", "hist", "latency", "probe", "list",
            "delete", "cleanup"]
# The command name a module registers, where it is not the module's name.
COMMAND_NAMES = {"delete": "del"}


class LazyCommands(argparse._SubParsersAction):
    """Subcommands whose modules are imported only when named on the command line or for --help.

    Importing every command (and so every core: psutil, tracefs, the probe compiler) costs each
    run ~50 ms, a third of a warm `kprobe-tui lines` on a vmlinux; a command needs only its own.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._modules = {COMMAND_NAMES.get(module, module): module for module in COMMANDS}
        self._name_parser_map.update(dict.fromkeys(self._modules))  # valid choices before they load

    def load(self, name: str) -> None:
        if self._name_parser_map.get(name) is None and name in self._modules:
            del self._name_parser_map[name]
            importlib.import_module(f"kprobe_tui.commands.{self._modules[name]}").add_parser(self)

    def __call__(self, parser, namespace, values, option_string=None):
        self.load(values[0])
        super().__call__(parser, namespace, values, option_string)

    def _get_subactions(self):
        """The help listing: every command's one-line help, in COMMANDS order."""
        for name in self._modules:
            self.load(name)
        order = list(self._modules)
        return sorted(self._choices_actions, key=lambda action: order.index(action.dest))


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
    parser.add_argument("--theme", metavar="NAME", help="colours of the TUI, remembered for next time: "
                        f"{', '.join(config.theme_names())} (default {config.DEFAULT_THEME}; NO_COLOR: {config.NO_COLOR_THEME})")
    add_source_options(parser)
    parser.add_subparsers(dest="command", metavar="COMMAND", action=LazyCommands)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        # Textual repaints one frame period after a change: at its default 60 fps that alone is
        # 16.7 ms, a whole keystroke's budget when filtering 100k names as you type.
        os.environ.setdefault("TEXTUAL_FPS", "120")
        from kprobe_tui.tui.app import run_app

        return _reporting_errors(run_app, args)
    # Whatever a command prints reaches the terminal without control characters (textsafe).
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = PrintableStream(sys.stdout), PrintableStream(sys.stderr)
    try:
        return _reporting_errors(args.run, args)
    finally:
        sys.stdout, sys.stderr = streams


def _reporting_errors(run, args) -> int:
    """Run a command (or the TUI): a UserError is a message and exit 2, anything else a bug (70)."""
    try:
        return run(args)
    except UserError as exc:
        print(f"kprobe-tui: {printable(str(exc), keep=chr(10))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:
        if os.environ.get("KPROBE_TUI_DEBUG"):
            raise
        print(
            f"kprobe-tui: internal error: {type(exc).__name__}: {printable(str(exc))}\n"
            "  hint: this is a bug in kprobe-tui; rerun with KPROBE_TUI_DEBUG=1 for the traceback and report it",
            file=sys.stderr,
        )
        return 70
