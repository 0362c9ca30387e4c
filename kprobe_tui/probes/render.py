"""One probe, three ways to write it: the tracefs line, ``perf probe``, and a ``bpftrace`` one-liner.

A learner sees what kprobe-tui writes to the kernel next to the commands they would type with
the usual tools. Names are made here too, so every form uses the same valid, unique names.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable

from kprobe_tui.errors import UserError
from kprobe_tui.kernel.definition import MAX_EVENT_NAME_LEN, sanitize
from kprobe_tui.kernel.definition import unique_name as unique_name  # where the probes' naming finds it
from kprobe_tui.kernel.lifetime import is_run_scoped
from kprobe_tui.probes.spec import CompiledProbe, ProbeArg, ProbeSpec

__all__ = ["bpftrace_oneliner", "by_event", "command_rows", "default_arg_name", "perf_command", "sanitize",
           "unique_name"]


def perf_hash(text: str) -> str:
    """perf's ``str_hash`` (h = h * 31 + c over the bytes, in a 64-bit size_t), as the 8 hex digits
    ``probe_trace_event__hash_event`` keeps of it."""
    value = 0
    for byte in text.encode(errors="surrogateescape"):
        value = (value * 31 + (byte - 256 if byte > 127 else byte)) % 2**64  # char is signed on x86
    return f"{value:x}"[:8]


def shorten(base: str, suffix: str = "") -> str:
    """``base + suffix`` as a valid event name, a long one cut the way perf cuts a long symbol
    (probe_trace_event__hash_event, perf 6.13): its first 46 characters, '_' and 8 hex digits of a
    hash of all of it, so two long names stay apart and ``__return`` still fits in 63."""
    if len(base) + len(suffix) <= MAX_EVENT_NAME_LEN:
        return base + suffix
    keep = min(46, MAX_EVENT_NAME_LEN - len(suffix) - 9)
    return f"{base[:keep]}_{perf_hash(base)}{suffix}"


def default_event_name(spec: ProbeSpec, line: int | None = None, function: str | None = None) -> str:
    """kprobe-tui's naming: ``func``, ``func__return``, ``func_L12``, ``func_16``, ``file_c_L12``; in the
    perf dialect, perf's (``perf_event_name``). ``function``: the one the place was found in (SRC:ALN)."""
    if spec.perf_dialect:
        return perf_event_name(spec, function)
    if spec.address is not None:
        base = f"addr_{spec.address:x}"
    else:
        base = spec.function or (spec.source or "probe").rsplit("/", 1)[-1]
    line = line if line is not None else spec.line
    suffix = ""
    if spec.is_return:
        suffix = "__return"
    elif line is not None:
        suffix = f"_L{line}"
    elif spec.offset:
        suffix = f"_{spec.offset}"
    return shorten(sanitize(base), suffix)


def perf_event_name(spec: ProbeSpec, function: str | None = None) -> str:
    """The name perf probe gives (parse_perf_probe_command, probe_trace_event__set_name,
    get_new_event_name): ``FUNC_L<line>`` for FUNC:LINE, else the function (the one holding SRC:ALN),
    ``abs_<hex>`` for an address; cut at its first '.' or '@' (``foo.isra.0`` -> ``foo``), then
    ``__return`` for a return probe. Every probe of one definition shares it (the kernel appends them
    to one event); a long name is cut as ``shorten`` cuts it, where perf fails."""
    if spec.event:
        return spec.event
    if spec.address is not None:
        base = f"abs_{spec.address:x}"
    elif spec.function and spec.line is not None and spec.lazy is None and not spec.offset:
        base = f"{spec.function}_L{spec.line}"
    else:
        base = spec.function or function or "probe"
    base = base.removeprefix(".")
    cut = re.search(r"[.@]", base[1:])
    if cut:
        base = base[: cut.start() + 1]
    return shorten(sanitize(base), "__return" if spec.is_return else "")


def perf_arg_name(arg: ProbeArg | None, base: str, position: int) -> str:
    """The field name perf gives an argument it was not given a NAME= for: a C variable's own spelling
    with ':' made '_' (``flags:x`` -> ``flags_x``), the last member of an access path (``sk->sk_state``
    -> ``sk_state``, ``rec->scores[2]`` -> ``scores``); a raw fetch-arg, a register, ``$retval`` go
    unnamed, and the kernel calls them ``arg<position>`` (perf's find_variable, parse_perf_probe_arg)."""
    if arg is None:
        return base  # a member of $params or $vars: the variable's name
    if arg.kind != "var":
        return f"arg{position}"
    members = [step.member for step in arg.path if step.op != "[]"]
    if members:
        return members[-1]
    if arg.path:
        return arg.var
    return f"{arg.var}_{arg.type}" if arg.type else arg.var


def default_arg_name(arg: ProbeArg) -> str:
    """The field name for an argument: the last member of a C path (``sk->sk_state`` -> ``sk_state``)."""
    if arg.kind == "var":
        last = arg.path[-1] if arg.path else None
        if last is None:
            return arg.var
        if last.op == "[]":
            members = [step.member for step in arg.path if step.op != "[]"]
            return f"{members[-1] if members else arg.var}_{last.index}"
        return last.member
    if arg.kind == "argN":
        return f"arg{arg.index}"
    if arg.kind in ("reg", "symbol"):
        return arg.var
    if arg.kind in ("retval", "comm"):
        return arg.kind
    return "arg"


def perf_command(spec: ProbeSpec, group: str | None = None, event: str | None = None) -> str:
    """The ``perf probe`` command that asks for the same probe (perf cannot make fprobes or filters)."""
    if spec.kind == "fprobe":
        return "# perf probe cannot create fprobes (use the tracefs line above)"
    group, event = group or spec.group, event or spec.event
    if group and is_run_scoped(group):  # a run's group goes with the run, and perf and we refuse to be given it
        group = None  # perf's own default group then, as for any probe typed by hand
    head = spec.place_text()
    if spec.lazy is not None:  # perf splits the probe at spaces, and matches a ;PATTERN ignoring them
        head = "".join(head.split())
    if event:
        head = f"{group + ':' if group else ''}{event}={head}"
    words = ["perf", "probe"]
    if spec.binary:
        words += ["-x", spec.binary]
    if spec.module:
        words += ["-m", spec.module]
    words += ["-a", " ".join([head, *(str(arg) for arg in spec.args)])]  # -a takes the probe as one word
    return " ".join(shlex.quote(word) for word in words)


_PRINTF = {"s": "%d", "u": "%u", "x": "0x%x", "b": "%u"}


def _bpftrace_expr(arg: ProbeArg, spec: ProbeSpec) -> str | None:
    """How bpftrace reads the same value, or None when it cannot (locals, raw fetch-args)."""
    if arg.kind == "argN":
        return f"arg{arg.index - 1}"
    if arg.kind == "retval":
        return "retval"
    if arg.kind == "comm":
        return "comm"
    if arg.kind == "reg":
        return f'reg("{arg.var}")'
    if arg.kind == "symbol":
        address = f'{"uaddr" if spec.is_uprobe else "kaddr"}("{arg.var}")'
        return f"*{address}" if not arg.index else f"*({address} + {arg.index})"
    if arg.kind == "var" and (spec.kind in ("entry", "fprobe") or (spec.is_return and not spec.is_uprobe)):
        return f"args.{arg.text}"  # params only (fentry, and fexit too): bpftrace has no locals
    return None


def _bpftrace_probe(spec: ProbeSpec, probe: CompiledProbe | None) -> str:
    function = probe.function if probe and probe.function else spec.function
    offset = probe.function_offset if probe else spec.offset
    if spec.is_uprobe:
        where = f"{spec.binary}:{function}" if function else f"{spec.binary}:0x{spec.address or 0:x}"
        kind = "uretprobe" if spec.is_return else "uprobe"
    else:
        # kprobes have no named args in bpftrace: C-level vars need fentry/fexit (BTF)
        uses_vars = any(a.kind == "var" for a in spec.args)
        where = function or f"0x{spec.address or 0:x}"
        if spec.kind == "fprobe" or uses_vars:
            kind = "fexit" if spec.is_return else "fentry"
            return f"{kind}:{where}"
        kind = "kretprobe" if spec.is_return else "kprobe"
    return f"{kind}:{where}" + (f"+{offset}" if offset and not spec.is_return else "")


def bpftrace_oneliner(spec: ProbeSpec, probes: list[CompiledProbe] | None = None, exclude_pid: int | None = None) -> str:
    """The bpftrace one-liner printing the same fields, attached at each of ``probes``' places; what bpftrace
    cannot read is named in a comment, and a filter's test of it left out (bpftrace refuses an unknown name)."""
    probe = probes[0] if probes else None
    compiled = {a.source: a for a in probe.args} if probe else {}
    fields, values, missing = [], [], []
    for arg in spec.args:
        expr = _bpftrace_expr(arg, spec)
        if expr is None:
            missing.append(arg.text)
            continue
        fetch = compiled.get(arg)
        label = fetch.name if fetch else arg.name or default_arg_name(arg)
        type_ = arg.type or (fetch.type if fetch else None)
        if arg.kind == "comm":
            fields.append(f"{label}=%s")
            values.append(expr)
        elif type_ in ("string", "ustring") or (type_ or "").startswith("symstr"):
            fields.append(f"{label}=%s")
            values.append(f"str({expr})")
        else:
            fields.append(f"{label}={_PRINTF.get((type_ or 'x')[0], '%ld')}")
            values.append(expr)
    name = spec.event or (probe.event if probe else None) or spec.function or "probe"  # as the events table names it
    fmt = " ".join([name, *fields])
    call = ", ".join([f'"{fmt}\\n"', *values])
    predicate, untested = _bpftrace_predicate(spec, probe, exclude_pid)
    places = list(dict.fromkeys(_bpftrace_probe(spec, one) for one in probes)) if probes else [_bpftrace_probe(spec, None)]
    program = f"{','.join(places)}{predicate} {{ printf({call}); }}"
    line = f"bpftrace -e {shlex.quote(program)}"
    notes = []
    if missing:
        notes.append(f"bpftrace cannot read: {', '.join(missing)}"
                     + (f" (the filter's {' && '.join(untested)} left out)" if untested else ""))
    if spec.is_uprobe and any(re.search(r"\+\d+$", place) for place in places):
        # bpftrace checks a uprobe's FUNC+OFFSET for an instruction boundary with a disassembler; a build
        # without one refuses it, --unsafe or not (Debian's 0.17: tests/kernel/test_bpftrace_guest.py)
        notes.append("FUNC+OFFSET needs a bpftrace built with its disassembler (Debian's 0.17 refuses it)")
    if spec.is_uprobe and spec.function and spec.source:
        notes.append(f"bpftrace takes no source file: its {spec.function} may be another file's of that name")
    return line + (f"  # {'; '.join(notes)}" if notes else "")


def _bpftrace_predicate(spec: ProbeSpec, probe: CompiledProbe | None, exclude_pid: int | None) -> tuple[str, list[str]]:
    """The predicate, and the filter's tests left out of it because they name a value bpftrace cannot read."""
    tests, untested = [], []
    if spec.filter:
        unreadable = set()
        renames = []
        for arg in spec.args:
            field = arg.name or (default_arg_name(arg) if probe is None else None)
            for fetch in probe.args if probe else ():
                if fetch.source == arg:
                    field = fetch.name
            bp = _bpftrace_expr(arg, spec)
            if field and bp:
                renames.append((field, bp))
            elif field:
                unreadable.add(field)
        for test in _conjuncts(spec.filter.replace("common_pid", "pid")):
            if any(re.search(rf"\b{re.escape(field)}\b", test) for field in unreadable):
                untested.append(test)
                continue
            for field, bp in renames:
                test = re.sub(rf"\b{re.escape(field)}\b", bp, test)
            tests.append(test if test.startswith("(") else f"({test})")
    if exclude_pid is not None:
        tests.append(f"pid != {exclude_pid}")
    return (f" /{' && '.join(tests)}/" if tests else ""), untested


def _conjuncts(expr: str) -> list[str]:
    """``a && (b || c) && d`` as its top-level tests (outside parentheses and quotes)."""
    parts, depth, start, quote = [], 0, 0, ""
    index = 0
    while index < len(expr):
        char = expr[index]
        if quote:
            quote = "" if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif expr.startswith("&&", index) and depth == 0:
            parts.append(expr[start:index].strip())
            start = index + 2
            index += 1
        index += 1
    parts.append(expr[start:].strip())
    whole = [part for part in parts if part]
    if len(whole) == 1 and _wrapped(whole[0]):  # "(a && b)": its inner tests
        return _conjuncts(whole[0][1:-1])
    return whole


def _wrapped(test: str) -> bool:
    """Whether one pair of parentheses encloses all of ``test``."""
    if not (test.startswith("(") and test.endswith(")")):
        return False
    depth = 0
    for index, char in enumerate(test):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0 and index < len(test) - 1:
            return False
    return True


def always_quoted(word: str) -> str:
    """``word`` in single quotes for a shell, its own quotes escaped: a spec word looks the same every time."""
    return "'" + word.replace("'", "'\"'\"'") + "'"


def shell_write(text: str, path: str, append: bool = True, sudo: bool = False) -> str:
    """The shell command that writes ``text`` as one line to ``path``, every word quoted (shlex).

    ``echo`` as the primer writes it; ``printf '%s\\n'`` when ``echo`` would not print the text as
    it is (dash's and zsh's echo turn backslashes into escapes, and a leading '-' is an option).
    ``sudo``: the text goes through a pipe to ``sudo sh -c 'cat >> FILE'``, so no second shell
    parses it (``sudo tee -a`` would be shorter, but it seeks to the end, which tracefs refuses).
    """
    writer = ["printf", "%s\\n"] if "\\" in text or text.startswith("-") else ["echo"]
    words = [shlex.quote(word) for word in [*writer, text]]
    redirect = f"{'>>' if append else '>'} {shlex.quote(path)}"
    if sudo:
        return " ".join([*words, "|", "sudo", "sh", "-c", shlex.quote(f"cat {redirect}")])
    return " ".join([*words, redirect])


def tracefs_commands(probe: CompiledProbe, filter: str | None, tracefs_root: str = "/sys/kernel/tracing",
                     sudo: bool = False) -> list[str]:
    """The shell commands that make ``probe`` by hand: its definition, then its filter."""
    lines = [shell_write(probe.definition(), f"{tracefs_root}/{probe.control_file}", sudo=sudo)]
    if filter:
        lines.append(shell_write(filter, f"{tracefs_root}/events/{probe.group}/{probe.event}/filter", False, sudo))
    return lines


def by_event(probes: Iterable[CompiledProbe]) -> list[list[CompiledProbe]]:
    """Probes grouped by the event they make, in order: a line's several addresses are one event."""
    events: dict[tuple[str, str], list[CompiledProbe]] = {}
    for probe in probes:
        events.setdefault((probe.group, probe.event), []).append(probe)
    return list(events.values())


def command_rows(spec: ProbeSpec, probes: list[CompiledProbe],
                 tracefs_root: str = "/sys/kernel/tracing") -> list[tuple[str, str]]:
    """(label, command) for one event's probes, as each tool makes them: the tracefs writes (the filter on a
    row labelled ""), ``perf probe`` (one command makes them all) and ``bpftrace`` (one program, every place);
    the CLI prints these rows and the builder shows them."""
    first = probes[0]
    rows = [("tracefs" if n == 0 else "", tracefs_commands(probe, None, tracefs_root)[0]) for n, probe in enumerate(probes)]
    rows += [("", line) for line in tracefs_commands(first, spec.filter, tracefs_root)[1:]]
    rows.append(("perf", perf_command(spec, first.group, first.event)))
    rows.append(("bpftrace", bpftrace_oneliner(spec, probes)))
    return rows


def admin_handoff(spec: ProbeSpec, probes: list[CompiledProbe], user: str,
                  tracefs_root: str = "/sys/kernel/tracing") -> list[str]:
    """What a user without tracefs write access hands to an administrator: the probe made with
    ``perf probe`` or by hand, then the one-time step that lets the ``perf`` group use tracefs
    (as Documentation/admin-guide/perf-security.rst sets up a perf users group)."""
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\$?", user):  # it goes into a comment line as well
        raise UserError(f"{user!r}: not a user name an administrator can add to a group", "")
    lines = ["# the probe, with perf:"]
    lines += [f"sudo {perf_command(spec, same[0].group, same[0].event)}" for same in by_event(probes)]
    lines.append("# or by hand, without perf:")
    for same in by_event(probes):
        lines += [tracefs_commands(probe, None, tracefs_root, sudo=True)[0] for probe in same]
        lines += tracefs_commands(same[0], spec.filter, tracefs_root, sudo=True)[1:]
    root = shlex.quote(tracefs_root)
    lines += [
        f"# once, so that {user} can enable and read probes without sudo (the perf group):",
        f"sudo groupadd -f perf && sudo usermod -aG perf {shlex.quote(user)}",
        f"sudo mount -o remount,mode=750 {root}",
        f"sudo chgrp -R perf {root} && sudo chmod -R g+rwX {root}",  # X: directories traversable
    ]
    return lines
