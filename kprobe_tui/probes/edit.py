"""A probe's definition read back into the builder's fields, to edit it (the kernel cannot change a probe:
the builder makes a new one, and the old one is deleted).

What the definition no longer says (the source line a uprobe was placed by, the filter) is named, so
the person editing knows what to give again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kprobe_tui.errors import UserError
from kprobe_tui.kernel import lifetime
from kprobe_tui.kernel.events import DynamicEvent, kind_of, probe_body
from kprobe_tui.probes.compile import compile_spec, running_kernel_vmlinux
from kprobe_tui.probes.render import sanitize
from kprobe_tui.probes.spec import parse_spec
from kprobe_tui.probes.symbols import ElfSymbols

if TYPE_CHECKING:
    from kprobe_tui.probes.form import BuilderKind

EDITABLE_KINDS = "prf"  # what the builder makes: kprobes, uprobes, fprobes (and their return forms)
_LINE_PROBE_NAME = re.compile(r"(?P<function>\w+)_L(?P<line>\d+)(?:_\d+)?")


@dataclass(frozen=True)
class EditTarget:
    """What the builder can be prefilled with from a probe's definition, and what is lost."""

    function: str
    binary: str | None
    kind: BuilderKind
    number: str
    args: str
    lost: tuple[str, ...]


def edit_target(event: DynamicEvent, top_filter: str = "") -> EditTarget:
    """Read back a definition into builder fields; a UserError when the builder cannot make it."""
    if event.prefix not in EDITABLE_KINDS:
        raise UserError(f"{event.full_name} is a {kind_of(event)}: the builder makes kprobes, uprobes and fprobes only")
    words = event.definition.split()
    place, args = words[1], " ".join(words[2:])
    lost = ["its name (the builder picks a free one in this run's group)"]
    if event.group != lifetime.run_name():
        lost.append(f"its group {event.group}: the new probe is this run's (Pin keeps it after exit)")
    if top_filter and top_filter != "none":
        lost.append(f"its filter ({top_filter}): type it again")
    if event.prefix == "f":
        function = place.removesuffix("%return")
        return EditTarget(function, None, "fprobe_exit" if place.endswith("%return") else "fprobe", "", args, tuple(lost))
    kind: BuilderKind = "return" if event.prefix == "r" else "entry"
    if event.is_uprobe:
        binary, offset = _uprobe_place(event, place)
        function, into = _function_at(ElfSymbols(binary), binary, offset)
    else:
        binary = None
        function, _, into_text = place.partition("+")
        if function.startswith("0x"):
            raise UserError(f"{event.full_name} is placed by address ({function})", "build it again from the function list")
        into = int(into_text or "0", 0)
    if into and kind == "entry":
        line = source_line(event, function, binary)
        if line is not None:
            return EditTarget(function, binary, "line", line, args, tuple(lost))
        lost.append("its source line, if it had one: it comes back as an offset into the function")
        return EditTarget(function, binary, "offset", f"+{into}", args, tuple(lost))
    return EditTarget(function, binary, kind, "", args, tuple(lost))


def line_place(event: DynamicEvent) -> str | None:
    """``work:3``: the source line a probe was made for, as the builder was asked and the statistics view
    names it, when its name says one and the line still compiles to its places; None for any other probe."""
    if _LINE_PROBE_NAME.fullmatch(event.event) is None:  # no DWARF read for what cannot be a line
        return None
    try:
        target = edit_target(event)
    except UserError:  # a program gone or changed: its kernel name is what is known
        return None
    return f"{target.function}:{target.number}" if target.kind == "line" else None


def source_line(event: DynamicEvent, function: str, binary: str | None) -> str | None:
    """The line (from the function's first) a probe was placed by, when its name says one (``work_L3``,
    as the builder and perf name line probes) and that line still compiles to exactly its places; else None."""
    named = _LINE_PROBE_NAME.fullmatch(event.event)
    if named is None or named["function"] != sanitize(function):
        return None
    try:
        spec = parse_spec([f"{function}:{named['line']}"], binary=binary, group=event.group)
        probes = compile_spec(spec, event.group, vmlinux=None if binary else running_kernel_vmlinux(spec))
    except UserError:  # no debug info, or the line is gone: the offsets are what is known
        return None
    placed = {probe_body(line)[1] for line in event.definitions}
    return named["line"] if placed == {probe_body(probe.definition())[1] for probe in probes} else None


def _uprobe_place(event: DynamicEvent, place: str) -> tuple[str, int]:
    """(binary, file offset) of a uprobe's place as the kernel shows it (``/bin/prog:0x000000000000113b``)."""
    binary, _, offset_text = place.rpartition(":")
    try:
        return binary, int(offset_text.split("(", 1)[0], 16)
    except ValueError:
        raise UserError(f"{event.full_name}: cannot read its place {place!r}", "build it again from the function list") from None


def _function_at(symbols: ElfSymbols, binary: str, offset: int) -> tuple[str, int]:
    """The function holding a file offset, and how far into it."""
    found = next(((sym.name, offset - sym.file_offset) for same in symbols.functions.values() for sym in same
                  if sym.file_offset <= offset < sym.file_offset + max(sym.size, 1)), None)
    if found is None:
        raise UserError(f"0x{offset:x} is in no function of {binary}", "build a new probe from the function list")
    return found


def uprobe_places(event: DynamicEvent) -> dict[int, str]:
    """An event of several uprobes (a line's addresses): each place as ``work+33``, by its offset in its page.

    A hit's address is where the program was mapped plus the file offset, and a mapping starts on a page:
    the low 12 bits tell which of the event's probes fired. Empty for one probe, kprobes (their hits name
    the symbol) and places 4096 bytes apart (they would look the same)."""
    if not event.is_uprobe or not event.extra:
        return {}
    places = [_uprobe_place(event, line.split()[1]) for line in event.definitions]
    symbols = ElfSymbols(places[0][0])
    labels: dict[int, str] = {}
    for binary, offset in places:
        function, into = _function_at(symbols, binary, offset)
        labels[offset & 0xFFF] = f"{function}+{into}"
    return labels if len(labels) == len(places) else {}
