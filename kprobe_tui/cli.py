"""The ``kprobe-tui`` command: no subcommand opens the TUI, subcommands run the same cores headless."""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys

from kprobe_tui import __version__, config
from kprobe_tui.errors import UserError
from kprobe_tui.textsafe import PrintableStream, printable

# Each name is a module in kprobe_tui.commands with ``add_parser(subparsers)`` and ``run(args) -> int``.
COMMANDS = ["funcs", "doctor", "snapshot", "lines", "vars", "tail", "count", "hist", "latency", "probe", "list",
            "delete", "cleanup", "export", "serve", "graph"]
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
            if name not in PERF_COMMANDS:
                add_common_options(self._name_parser_map[name], top=False)

    def __call__(self, parser, namespace, values, option_string=None):
        self.load(values[0])
        super().__call__(parser, namespace, values, option_string)

    def _get_subactions(self):
        """The help listing: every command's one-line help, in COMMANDS order."""
        for name in self._modules:
            self.load(name)
        order = list(self._modules)
        return sorted(self._choices_actions, key=lambda action: order.index(action.dest))


# -x/-k/-m/-s: what a command acts on, spelled as perf probe spells them and meaning the same for every
# command (attribute, flags, metavar, help). A command lists the ones it takes in its module's OPTIONS.
TARGET_OPTIONS = (
    ("binary", ("-x", "--exec"), "BINARY", "a user program or shared library (uprobes) instead of the kernel"),
    ("vmlinux", ("-k", "--vmlinux"), "VMLINUX", "the kernel's debug image (default: found for the running kernel)"),
    ("module", ("-m", "--module"), "MODULE", "a kernel module: a loaded module's name, or a module file"),
    ("source_dir", ("-s", "--source"), "DIR", "prefix for source file paths"),
)
# What each target option is called in messages.
TARGET_FLAGS = {dest: flags[0] for dest, flags, _, _ in TARGET_OPTIONS}
# --snapshot and friends: every reader of the kernel reads captured copies; every command takes them.
OFFLINE_OPTIONS = (
    ("snapshot", "FILE", "read a kprobe-tui snapshot archive (read-only)"),
    ("tracefs", "DIR", "tracefs directory to read instead of the live one"),
    ("debugfs", "DIR", "debugfs directory (for kprobes/blacklist)"),
    ("kallsyms", "FILE", "kallsyms file instead of /proc/kallsyms"),
    ("btf", "FILE", "BTF file of vmlinux (module BTF is read beside it)"),
)


def add_common_options(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """The options every command shares, before or after its name (``kprobe-tui -x P funcs`` is
    ``kprobe-tui funcs -x P``). After the name they default to SUPPRESS, so they leave a value given
    before it alone instead of resetting it."""
    default = None if top else argparse.SUPPRESS
    targets = parser.add_argument_group("what to act on")
    for dest, flags, metavar, help_text in TARGET_OPTIONS:
        targets.add_argument(*flags, dest=dest, metavar=metavar, help=help_text, default=default)
    offline = parser.add_argument_group("offline kernel data")
    for dest, metavar, help_text in OFFLINE_OPTIONS:
        offline.add_argument(f"--{dest}", metavar=metavar, help=help_text, default=default)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kprobe-tui",
        description="Explore and use Linux dynamic probes. With no command, opens the terminal UI "
                    "(-x BINARY: on a program's or library's functions). -x/-k/-m/-s and the offline "
                    "options go before or after the command.",
    )
    parser.add_argument("--version", action="version", version=f"kprobe-tui {__version__}")
    parser.add_argument("--theme", metavar="NAME", help="colours of the TUI, remembered for next time: "
                        f"{', '.join(config.theme_names())} (default {config.DEFAULT_THEME}; NO_COLOR: {config.NO_COLOR_THEME})")
    add_common_options(parser, top=True)
    parser.add_subparsers(dest="command", metavar="COMMAND", action=LazyCommands)
    return parser


# What the TUI (no command) acts on.
TUI_OPTIONS = frozenset({"binary", "vmlinux", "source_dir"})
# ``probe`` speaks perf probe's command line, which argparse cannot read (options in order, -x applying
# to the probes after it, one probe from the words after the options): what follows its name goes to
# its own reader (perfprobe/args.py), with the options given before its name counted as given first.
PERF_COMMANDS = frozenset({"probe"})
# Commands that run a program given after ``--`` (as perf ftrace does): argparse, whose sub-commands
# cannot take a ``--``, sees what comes before it; the program's words are ``args.program``.
PROGRAM_COMMANDS = frozenset({"graph"})


def main(argv: list[str] | None = None) -> int:
    # Whatever a command prints reaches the terminal without control characters (textsafe), and a write
    # that fails (a full disk, a closed pipe) is told apart from the errors of what a command reads.
    streams = sys.stdout, sys.stderr
    output = CheckedOutput(PrintableStream(sys.stdout))
    sys.stdout, sys.stderr = output, PrintableStream(sys.stderr)
    try:
        return _reporting_errors(lambda: _run(argv, streams), output)
    finally:
        sys.stdout, sys.stderr = streams


def _run(argv: list[str] | None, streams) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    at = command_index(parser, argv)
    if at is not None and argv[at] in PERF_COMMANDS:
        args = parser.parse_args(argv[:at])
        args.command, args.words = argv[at], argv[at + 1 :]
        importlib.import_module(f"kprobe_tui.commands.{args.command}").prepare(args)
    elif at is not None and argv[at] in PROGRAM_COMMANDS and "--" in argv[at:]:
        dashes = argv.index("--", at)
        args = parser.parse_args(argv[:dashes])
        args.program = argv[dashes + 1:]
    else:
        args = parser.parse_args(argv)
    if args.command is None:
        sys.stdout, sys.stderr = streams  # the TUI draws on the terminal itself
        # Textual repaints one frame period after a change: at its default 60 fps that alone is
        # 16.7 ms, a whole keystroke's budget when filtering 100k names as you type.
        os.environ.setdefault("TEXTUAL_FPS", "120")
        from kprobe_tui.tui.app import run_app  # here: textual reads TEXTUAL_FPS when imported, and the TUI costs ~300-340 ms to import (-X importtime)

        return run_app(check_targets(args, TUI_OPTIONS, "the TUI"))
    module = sys.modules[args.run.__module__]
    return args.run(check_targets(args, getattr(module, "OPTIONS", frozenset()), args.command))


def command_index(parser: argparse.ArgumentParser, argv: list[str]) -> int | None:
    """Where the command's name is in ``argv``: the first word that is neither a top-level option nor its value."""
    at = 0
    while at < len(argv):
        word = argv[at]
        if word == "--" or not word.startswith("-") or word == "-":
            return at if word != "--" else None
        flag = word.split("=", 1)[0] if word.startswith("--") else word[:2]
        action = parser._option_string_actions.get(flag)
        if action is None and word.startswith("--"):  # an abbreviation argparse accepts too
            found = {id(a): a for name, a in parser._option_string_actions.items() if name.startswith(flag)}
            action = next(iter(found.values())) if len(found) == 1 else None
        attached = "=" in word if word.startswith("--") else len(word) > 2
        at += 2 if action is not None and action.nargs != 0 and not attached else 1
    return None


def check_targets(args, accepted: frozenset[str], what: str):
    """-x, -k and -m name one target; each option only where it means something. Returns ``args``."""
    given = [dest for dest, *_ in TARGET_OPTIONS if getattr(args, dest, None) is not None]
    targets = [dest for dest in given if dest != "source_dir"]
    if len(targets) > 1:
        raise UserError(f"{' and '.join(TARGET_FLAGS[d] for d in targets)} name two targets",
                        "give one of -x BINARY (a program), -k VMLINUX (the kernel) and -m MODULE (a kernel module)")
    for dest in given:
        if dest not in accepted:
            takes = ", ".join(TARGET_FLAGS[d] for d, *_ in TARGET_OPTIONS if d in accepted) or "none of -x/-k/-m/-s"
            raise UserError(f"{TARGET_FLAGS[dest]} has no meaning for {what}", f"{what} takes {takes}")
    for dest, *_ in TARGET_OPTIONS:
        if not hasattr(args, dest):
            setattr(args, dest, None)
    return args


class OutputFailed(Exception):
    """Standard output could not be written: what went wrong is the OSError's, not kprobe-tui's."""

    def __init__(self, error: OSError) -> None:
        super().__init__(error.strerror or str(error))
        self.errno = error.errno


class CheckedOutput:
    """Standard output whose failed writes and flushes raise ``OutputFailed``: an OSError of a file a
    command reads is that file's problem (a UserError naming it, or a bug), never "cannot write output"."""

    def __init__(self, stream) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except OSError as exc:
            raise OutputFailed(exc) from exc

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        try:
            self.stream.flush()
        except OSError as exc:
            raise OutputFailed(exc) from exc

    def __getattr__(self, name: str):
        return getattr(self.stream, name)  # fileno, isatty, encoding...


def _reporting_errors(run, output: CheckedOutput) -> int:
    """Run a command (or the TUI): a UserError is a message and exit 2, anything else a bug (70).

    Output still buffered is flushed here, where a failure can be reported (argparse's --help exits
    with its text unflushed): the interpreter's own flush at exit would print a traceback-like
    "Exception ignored" and exit 120.
    """
    try:
        try:
            return run()
        finally:
            output.flush()
    except UserError as exc:
        print(f"kprobe-tui: {printable(str(exc), keep=chr(10))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except OutputFailed as exc:
        _discard_output(output)
        if exc.errno == errno.EPIPE:  # the reader has gone (| head): nothing to tell it
            return 0
        print(f"kprobe-tui: cannot write output: {exc}\n  hint: send it to a file or pipe that can take it",
              file=sys.stderr)
        return 2
    except Exception as exc:
        if os.environ.get("KPROBE_TUI_DEBUG"):
            raise
        print(
            f"kprobe-tui: internal error: {type(exc).__name__}: {printable(str(exc))}\n"
            "  hint: this is a bug in kprobe-tui; rerun with KPROBE_TUI_DEBUG=1 for the traceback and report it",
            file=sys.stderr,
        )
        return 70


def _discard_output(output: CheckedOutput) -> None:
    """What could not be written goes nowhere: the interpreter flushes stdout again at exit."""
    try:
        fd = output.fileno()
    except (AttributeError, OSError, ValueError):
        return  # not a file (a test's capture): nothing is flushed at exit
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)
