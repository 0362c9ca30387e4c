"""What a compiled probe's notes say where the DWARF back-end moved or multiplied it, and reading that back.

Kept apart from the back-end so that reporting a probe (``kprobe-tui probe``) does not load the DWARF engine.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# What a probe's notes say when it is on an inlined copy, or past the prologue (perf says both its own way).
INLINED_NOTE = "inlined copy in "
PROLOGUE_NOTE = "prologue skipped (probe 0x{entry:x} to see the function's very first instruction)"


def prologue_entry(notes: Iterable[str]) -> int | None:
    """The function entry a probe's prologue skip moved away from, if its notes say so."""
    for note in notes:
        found = re.fullmatch(re.escape(PROLOGUE_NOTE).replace(r"0x\{entry:x\}", "0x([0-9a-f]+)"), note)
        if found:
            return int(found[1], 16)
    return None
