"""Names in the kernel's namespace: the event a probe defines, and its fetch-args' names.

Every back-end (raw, DWARF, BTF) names the same way: user-given names are kept verbatim and win,
defaults step aside and are made unique; in perf's dialect the names are perf's.
"""

from __future__ import annotations

from collections.abc import Iterable

from kprobe_tui.errors import UserError
from kprobe_tui.probes.render import default_event_name, perf_arg_name, unique_name
from kprobe_tui.probes.spec import MAX_ARG_NAME_LEN, MAX_EVENT_NAME_LEN, MAX_TRACE_ARGS, FetchArg, ProbeArg, ProbeSpec, sized


def name_fetch_args(pairs: Iterable[tuple[ProbeArg | None, str, str, str | None]], perf: bool = False) -> tuple[FetchArg, ...]:
    """(source, default name, fetch, type) -> FetchArgs with unique kernel-valid names; user names win.

    ``perf``: default names as perf gives them (``perf_arg_name``). A bare ``x``/``u``/``s`` left on a
    value of no known width (a register, raw memory) is 64 bits wide."""
    pairs = [(src, base, fetch, sized(type_, None) if type_ else type_) for src, base, fetch, type_ in pairs]
    if len(pairs) > MAX_TRACE_ARGS:
        raise UserError(f"{len(pairs)} arguments: the kernel takes at most {MAX_TRACE_ARGS}", "capture fewer values")
    user_names = [src.name for src, *_ in pairs if src is not None and src.name]
    duplicate = next((n for n in user_names if user_names.count(n) > 1), None)
    if duplicate:
        raise UserError(f"{duplicate!r}: two arguments have this name", "give each NAME= once")
    names: list[str] = []
    for position, (src, base, _, _) in enumerate(pairs, 1):
        if src is not None and src.name:
            names.append(src.name)
        else:  # defaults step aside for user-given names, which are kept verbatim
            wanted = perf_arg_name(src, base, position) if perf else base
            names.append(unique_name(wanted, set(names) | set(user_names), MAX_ARG_NAME_LEN))
    return tuple(FetchArg(name, fetch, type_, src, implicit_name=perf and _unnamed_raw(src) and name == f"arg{position}")
                 for position, (name, (src, _, fetch, type_)) in enumerate(zip(names, pairs), 1))


def _unnamed_raw(src: ProbeArg | None) -> bool:
    """A fetch-arg perf writes without NAME=: one written by hand, a register, a symbol, $retval..."""
    return src is not None and not src.name and src.kind != "var"


def event_name(spec: ProbeSpec, taken: Iterable[str], line: int | None = None, function: str | None = None) -> str:
    """The user's event name (refused if taken), or a default made unique in the group.

    In the perf dialect the name is perf's, taken or not, and shared by every probe of the spec (the
    kernel appends them to one event): whether a taken name is an error (perf's EEXIST) or gets a
    ``_1`` (``-f``) the caller decides, as perf's ``--force`` does."""
    if spec.perf_dialect:
        return default_event_name(spec, line, function)
    taken = set(taken)
    if spec.event:
        if spec.event in taken:
            raise UserError(f"{spec.event!r}: an event of that name exists in group {spec.group!r}", "pick another EVENT= name, or del it first")
        return spec.event
    return unique_name(default_event_name(spec, line), taken, MAX_EVENT_NAME_LEN)

