"""A probe's definition read back into the builder's fields, to edit it (the kernel cannot change a probe:
the builder makes a new one, and the old one is deleted).

What the definition no longer says (the source line a uprobe was placed by, the filter) is named, so
the person editing knows what to give again.
"""

from __future__ import annotations

from dataclasses import dataclass

from kprobe_tui.errors import UserError
from kprobe_tui.kernel import lifetime
from kprobe_tui.kernel.events import DynamicEvent, kind_of
from kprobe_tui.probes.compile import ElfSymbols

EDITABLE_KINDS = "prf"  # what the builder makes: kprobes, uprobes, fprobes (and their return forms)


@dataclass(frozen=True)
class EditTarget:
    """What the builder can be prefilled with from a probe's definition, and what is lost."""

    function: str
    binary: str | None
    kind: str  # a builder kind: entry, return, offset, fprobe, fprobe_exit
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
    kind = "return" if event.prefix == "r" else "entry"
    if event.is_uprobe:
        binary, _, offset_text = place.rpartition(":")
        try:
            offset = int(offset_text.split("(", 1)[0], 16)
        except ValueError:
            raise UserError(f"{event.full_name}: cannot read its place {place!r}", "build it again from the function list") from None
        symbols = ElfSymbols(binary)
        function, into = next(((sym.name, offset - sym.file_offset) for same in symbols.functions.values() for sym in same
                               if sym.file_offset <= offset < sym.file_offset + max(sym.size, 1)), (None, 0))
        if function is None:
            raise UserError(f"0x{offset:x} is in no function of {binary}", "build a new probe from the function list")
    else:
        binary = None
        function, _, into_text = place.partition("+")
        if function.startswith("0x"):
            raise UserError(f"{event.full_name} is placed by address ({function})", "build it again from the function list")
        into = int(into_text or "0", 0)
    if into and kind == "entry":
        lost.append("its source line, if it had one: it comes back as an offset into the function")
        return EditTarget(function, binary, "offset", f"+{into}", args, tuple(lost))
    return EditTarget(function, binary, kind, "", args, tuple(lost))
