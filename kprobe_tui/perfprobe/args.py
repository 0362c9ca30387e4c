"""perf probe's command line (tools/perf/builtin-probe.c and lib/subcmd/parse-options.c), read the way perf reads it.

* Options are read in order and stop at the first word that is not one (``--`` too): the words left
  are joined by spaces into one probe definition, which perf then splits on spaces (so
  ``'do_sys_openat2 filename=+0(%si):string'`` in one quoted word and the same in three words are the
  same probe). A first word starting with ``/`` names the program (or a ``.ko`` module) instead.
* ``-x``/``-m`` apply to the probes defined after them; one given after the last probe is an error.
* ``-a``, ``-d``, ``-D``, ``-l``, ``-L``, ``-V`` and ``-F`` exclude each other (each may repeat).
* ``-l`` and ``-F`` take a filter only when the next word does not start with ``-``.
* Long options may be shortened to any unique prefix; short ones cluster (``-nv``) and take a value
  attached or as the next word; ``--name=value`` works for long ones.

kprobe-tui's own options sit beside perf's and never change perf's: ``-g GROUP``, ``--json``, ``--yes``,
``--explain``, ``--fprobe``, ``--event-filter EXPR``, and the offline options every command takes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from kprobe_tui.errors import UserError

# Exit statuses as perf's: its commands return -errno, which perf exits with (& 0xff); usage is 129.
USAGE = 129
EINVAL = 256 - 22
ENOENT = 256 - 2
EEXIST = 256 - 17
E2BIG = 256 - 7

DEFAULT_FUNC_FILTER = "!_* & !*@plt"
DEFAULT_VAR_FILTER = "!__k???tab_* & !__crc_*"
DEFAULT_LIST_FILTER = "*"
MAX_PROBES = 128  # perf's MAX_PROBES: probe points one definition may expand to, unless --max-probes


class PerfUsageError(UserError):
    """A command line perf would refuse with its usage (exit 129)."""

    status = USAGE


class PerfError(UserError):
    """A failure perf reports with -errno: ``status`` is what perf exits with."""

    def __init__(self, message: str, hint: str = "", status: int = ENOENT) -> None:
        super().__init__(message, hint)
        self.status = status


@dataclass(frozen=True)
class Definition:
    """One probe definition (``-a``, ``-D``, ``-V`` or the words after the options) and what it is on."""

    text: str  # as perf joins it: split on spaces into the place and its arguments
    binary: str | None = None  # -x (resolved, as perf makes it absolute)
    module: str | None = None  # -m
    from_option: bool = False  # -a/-D/-V: perf parses it in the option's callback, so bad syntax is a usage error (129)

    @property
    def words(self) -> tuple[str, ...]:
        return tuple(self.text.split())


@dataclass
class PerfCommand:
    action: str | None = None  # "add", "definition", "del", "list", "line", "vars", "funcs"
    definitions: list[Definition] = field(default_factory=list)
    filters: list[str] = field(default_factory=list)  # -l/-d/-F arguments and --filter, ORed as perf does
    line: str | None = None  # -L
    binary: str | None = None  # the last -x (for -F, -L)
    module: str | None = None  # the last -m
    vmlinux: str | None = None
    source: str | None = None
    force: bool = False
    dry_run: bool = False
    quiet: bool = False
    verbose: int = 0
    externs: bool = False
    no_inlines: bool = False
    range: bool = False
    max_probes: int = MAX_PROBES
    # kprobe-tui's own
    group: str | None = None  # -g: the group of probes that name none (perf's: probe, probe_<program>)
    json: bool = False
    yes: bool = False
    explain: bool = False
    fprobe: bool = False
    event_filter: str | None = None
    offline: dict[str, str] = field(default_factory=dict)
    help: bool = False


@dataclass(frozen=True)
class _Option:
    short: str | None
    long: str
    kind: str  # "flag", "count", "value", "optional"
    help: str
    metavar: str = ""
    ours: bool = False


OPTIONS = [
    _Option("a", "add", "value", "add a probe: [[GROUP:]EVENT=]FUNC[@SRC][:RLN|+OFF|%return|;PTN]|SRC:ALN|SRC;PTN [ARG...]", "PROBEDEF"),
    _Option("d", "del", "value", "delete probe events: [GROUP:]EVENT, globs (perf's filter: !, &, |)", "[GROUP:]EVENT"),
    _Option("l", "list", "optional", "list the kprobe and uprobe events, as perf probe lists them", "[GROUP:]EVENT"),
    _Option("D", "definition", "value", "print the kprobe_events/uprobe_events line(s) of a probe, create nothing", "PROBEDEF"),
    _Option("L", "line", "value", "show a function's source with its probeable lines", "FUNC[:RLN[+NUM|-RLN2]]|SRC:ALN[+NUM|-ALN2]"),
    _Option("V", "vars", "value", "show the variables that can be read at a probe point", "FUNC[@SRC][:RLN|%return]"),
    _Option("F", "funcs", "optional", "show the functions that can be probed (default filter: !_* & !*@plt)", "[FILTER]"),
    _Option(None, "filter", "value", "a filter for --vars and --funcs (perf's: globs with !, &, |)", "[!]FILTER"),
    _Option("x", "exec", "value", "the program or library the probes after it go on (uprobes)", "BINARY"),
    _Option("m", "module", "value", "the kernel module the probes after it are in (a name, or a .ko file)", "MODULE"),
    _Option("k", "vmlinux", "value", "the kernel's debug image", "VMLINUX"),
    _Option("s", "source", "value", "where the source files are", "DIR"),
    _Option("f", "force", "flag", "add a probe even when its event name exists (as NAME_1, ...)"),
    _Option("n", "dry-run", "flag", "do everything but write to the kernel"),
    _Option("q", "quiet", "flag", "print no messages (perf's text on stderr)"),
    _Option("v", "verbose", "count", "say more: kprobe-tui's notes about each probe"),
    _Option(None, "externs", "flag", "with --vars: also global and static variables"),
    _Option(None, "no-inlines", "flag", "do not probe the inlined copies of a function"),
    _Option(None, "range", "flag", "with --vars: where in the function each variable can be read"),
    _Option(None, "max-probes", "value", f"refuse a definition that finds more probe points (default {MAX_PROBES})", "N"),
    _Option("g", "group", "value", "the group of the probes that name none (default: perf's, probe or probe_<program>)",
            "GROUP", ours=True),
    _Option(None, "json", "flag", "print what was made as JSON on stdout instead of perf's text", ours=True),
    _Option("y", "yes", "flag", "create it even when the feedback guard warns (SSH output path)", ours=True),
    _Option(None, "explain", "flag", "also print, for each probe, its tracefs line, perf and bpftrace commands and notes",
            ours=True),
    _Option(None, "fprobe", "flag", "make fprobes (f:) on kernel function entry or %return", ours=True),
    _Option(None, "event-filter", "value", "set this event filter on the new events, e.g. 'len > 100'", "EXPR", ours=True),
    *[_Option(None, name, "value", f"offline: {what}", metavar, ours=True) for name, metavar, what in (
        ("snapshot", "FILE", "read a kprobe-tui snapshot archive"), ("tracefs", "DIR", "tracefs directory to read"),
        ("debugfs", "DIR", "debugfs directory"), ("kallsyms", "FILE", "kallsyms file"), ("btf", "FILE", "BTF of vmlinux"))],
    _Option("h", "help", "flag", "show this help", ours=True),
]
_UNSUPPORTED = {"cache", "symfs", "target-ns", "bootconfig", "demangle", "demangle-kernel"}
_ACTIONS = {"add": "add", "del": "del", "list": "list", "definition": "definition", "line": "line", "vars": "vars",
            "funcs": "funcs"}
_SHORT = {option.short: option for option in OPTIONS if option.short}
_LONG = {option.long: option for option in OPTIONS}


def parse(words: list[str]) -> PerfCommand:
    """The command ``words`` (what follows ``kprobe-tui probe``) ask for; a PerfUsageError or PerfError else."""
    command = PerfCommand()
    target_used = True
    at = 0
    option: _Option | None  # a short letter may name none
    value: str | None  # an "optional" option may have none
    while at < len(words):
        word = words[at]
        if word == "--":
            at += 1
            break
        if not word.startswith("-") or word == "-":
            break
        if word.startswith("--"):
            name, has_value, value = word[2:].partition("=")
            option = _long(name)
            if option.kind in ("flag", "count") and has_value:
                raise PerfUsageError(f"option `{option.long}' takes no value")
            if option.kind == "value" and not has_value:
                at, value = _next_value(words, at, option)
            elif option.kind == "optional" and not has_value:
                at, value = _optional_value(words, at)
            target_used = _apply(command, option, value if option.kind in ("value", "optional") else None, target_used)
            at += 1
            continue
        cluster = word[1:]
        while cluster:
            option = _SHORT.get(cluster[0])
            if option is None:
                raise PerfUsageError(f"unknown switch `{cluster[0]}'", "see: kprobe-tui probe --help")
            tail = cluster[1:]
            if option.kind in ("flag", "count"):
                target_used = _apply(command, option, None, target_used)
                cluster = tail
                continue
            if tail:
                value = tail
            elif option.kind == "optional":
                at, value = _optional_value(words, at)
            else:
                at, value = _next_value(words, at, option)
            target_used = _apply(command, option, value, target_used)
            break
        at += 1
    rest = words[at:]
    if command.quiet and command.verbose:
        raise PerfError("-v and -q are exclusive", "pass one of them", EINVAL)
    if rest:
        if rest[0] == "-":
            raise PerfUsageError("'-' is not supported")
        if command.action not in (None, "add"):
            raise PerfUsageError(f"another command except --add is set: {' '.join(rest)!r} is left over",
                                 "quote a probe with its arguments as one word, or give it with -a")
        binary, module = command.binary, command.module
        if rest[0].startswith("/") and command.binary is None and command.module is None:
            # perf probe /bin/bash readline: the first word names the program (a .ko: the module)
            binary, module = (None, rest[0]) if rest[0].endswith(".ko") else (os.path.realpath(rest[0]), None)
            rest = rest[1:]
        if rest:
            command.definitions.append(Definition(" ".join(rest), binary, module))
            target_used = True
        command.action = "add"
    if command.action in ("add", "definition") and not target_used:
        raise PerfError("-x/-m must follow the probe definitions", "put -x BINARY (or -m MODULE) before the probes it is for",
                        EINVAL)
    return command


def _long(name: str) -> _Option:
    if name in _LONG:
        return _LONG[name]
    if name in _UNSUPPORTED:
        raise PerfUsageError(f"--{name}: perf probe's option is not supported by kprobe-tui",
                             "kprobe-tui probe takes perf's options for making, listing and removing probes")
    found = [option for long, option in _LONG.items() if long.startswith(name)] if name else []
    if len(found) == 1:
        return found[0]
    if found:
        raise PerfUsageError(f"ambiguous option: {name} (could be --{' or --'.join(o.long for o in found)})")
    raise PerfUsageError(f"unknown option `{name}'", "see: kprobe-tui probe --help")


def _next_value(words: list[str], at: int, option: _Option) -> tuple[int, str]:
    if at + 1 >= len(words):
        raise PerfUsageError(f"option `{option.long}' requires a value")
    return at + 1, words[at + 1]


def _optional_value(words: list[str], at: int) -> tuple[int, str | None]:
    """PARSE_OPT_LASTARG_DEFAULT: the next word, unless there is none or it looks like an option."""
    if at + 1 < len(words) and not words[at + 1].startswith("-"):
        return at + 1, words[at + 1]
    return at, None


def _apply(command: PerfCommand, option: _Option, value: str | None, target_used: bool) -> bool:
    """Record one option; returns whether the last -x/-m has been used by a probe since."""
    name = option.long
    if name in _ACTIONS:
        action = _ACTIONS[name]
        if command.action not in (None, action):
            raise PerfUsageError(f"option `{name}' cannot be used with --{_long_of(command.action)}",
                                 "one of -a, -d, -D, -l, -L, -V, -F at a time")
        command.action = action
        if name in ("add", "definition", "vars"):
            command.definitions.append(Definition(_word(option, value), command.binary, command.module, from_option=True))
            return True
        if name == "line":
            command.line = command.line or value  # perf: "only the first one is valid"
        elif name == "list":
            command.filters.append(value if value is not None else DEFAULT_LIST_FILTER)
        elif name == "funcs":
            command.filters.append(value if value is not None else DEFAULT_FUNC_FILTER)
        else:
            command.filters.append(_word(option, value))
        return target_used
    if name in ("exec", "module"):
        path = _word(option, value)
        if name == "exec":
            command.binary, command.module = os.path.realpath(path), None
        else:
            command.module, command.binary = (os.path.realpath(path) if "/" in path else path), None
        return False
    if name == "filter":
        command.filters.append(_word(option, value))
    elif name == "vmlinux":
        command.vmlinux = value
    elif name == "source":
        command.source = value
    elif name == "max-probes":
        try:
            command.max_probes = int(_word(option, value), 10)
        except ValueError:
            raise PerfUsageError(f"option `max-probes' expects a numerical value, not {value!r}") from None
    elif name == "event-filter":
        command.event_filter = value
    elif name == "group":
        command.group = value
    elif name in ("snapshot", "tracefs", "debugfs", "kallsyms", "btf"):
        command.offline[name] = _word(option, value)
    elif name == "verbose":
        command.verbose += 1
    else:
        setattr(command, name.replace("-", "_"), True)
    return target_used


def _word(option: _Option, value: str | None) -> str:
    """The word of a "value" option: parse takes one with the option or stops with a usage error."""
    assert value is not None, f"--{option.long} takes a value"
    return value


def _long_of(action: str) -> str:
    return next(long for long, act in _ACTIONS.items() if act == action)


def usage() -> str:
    """The help text: perf's usage lines, then every option, perf's first."""
    lines = [
        "usage: kprobe-tui probe [<options>] 'PROBEDEF' ['PROBEDEF' ...]   (the words make one probe, as in perf)",
        "   or: kprobe-tui probe [<options>] --add 'PROBEDEF' [--add 'PROBEDEF' ...]",
        "   or: kprobe-tui probe [<options>] --del '[GROUP:]EVENT' ...",
        "   or: kprobe-tui probe --list [GROUP:]EVENT ...",
        "   or: kprobe-tui probe [<options>] --line 'LINEDESC'",
        "   or: kprobe-tui probe [<options>] --vars 'PROBEPOINT'",
        "   or: kprobe-tui probe [<options>] --funcs [FILTER]",
        "",
        "perf probe's command line: put kprobe-tui where perf is. Probes go where perf puts them (group probe,",
        "probe_<program> for -x) and stay until deleted; perf's text is printed as perf prints it (stdout for",
        "-l/-L/-V/-F/-D, stderr for 'Added new event'); kprobe-tui's additions print only when asked (--explain,",
        "--json), or on stderr prefixed 'kprobe-tui:'. Exit statuses are perf's.",
        "",
    ]
    for ours in (False, True):
        lines.append("kprobe-tui's own options:" if ours else "perf probe's options:")
        for option in OPTIONS:
            if option.ours != ours:
                continue
            flags = ", ".join(filter(None, (f"-{option.short}" if option.short else "", f"--{option.long}")))
            if option.metavar:
                flags += f" {option.metavar}" if option.kind == "value" else f" [{option.metavar.strip('[]')}]"
            lines.append(f"  {flags}\n      {option.help}")
        lines.append("")
    lines.append("kernel places are written SYMBOL+OFFSET where perf writes _text+OFFSET: the same address.")
    return "\n".join(lines) + "\n"
