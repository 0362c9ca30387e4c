"""What the kernel layer takes as a probe: a definition line for one control file, and the rules of its names.

``events`` creates and pins probes through this shape; ``probes.spec.CompiledProbe`` is the one that
fills it (from perf's syntax, DWARF, BTF). Defined here so the kernel layer never imports the compiler.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Protocol

__all__ = ["DEFAULT_PERSISTENT_GROUP", "MAX_EVENT_NAME_LEN", "ProbeDefinition", "sanitize", "unique_name"]

# Event and group names: the kernel's MAX_EVENT_NAME_LEN is 64 bytes with the NUL;
# traceprobe_parse_event_name refuses an event of len >= 64 and a group of len + 1 > 64, so 63
# characters at most (kernel/trace/trace.h and trace_probe.c, the same in 6.1 and 6.12; measured
# in tests/kernel/test_untrusted_guest.py).
MAX_EVENT_NAME_LEN = 63

DEFAULT_PERSISTENT_GROUP = "kprobe_tui"


class ProbeDefinition(Protocol):
    """A probe ready for the kernel: ``definition()`` is the line written to ``control_file``."""

    @property
    def group(self) -> str: ...

    @property
    def event(self) -> str: ...

    @property
    def prefix(self) -> str: ...  # p, r or f: the line's first letter

    @property
    def control_file(self) -> str: ...

    @property
    def filter(self) -> str | None: ...  # set on the event once it exists

    @property
    def is_uprobe(self) -> bool: ...

    def definition(self) -> str: ...

    def check(self) -> ProbeDefinition:
        """Itself, once proven to be one line the kernel parses as meant; else a UserError."""
        ...


def sanitize(text: str) -> str:
    """A kernel-acceptable name from any text: ``foo.isra.0`` -> ``foo_isra_0``, ``café`` -> ``caf_``."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", text)
    return name if re.match(r"[A-Za-z_]", name) else f"_{name}"


def unique_name(base: str, taken: Iterable[str], limit: int) -> str:
    """``base`` cut to ``limit`` chars, with ``_1``, ``_2``... when already taken (as perf does)."""
    taken = set(taken)
    name = sanitize(base)[:limit]
    number = 0
    while name in taken:
        number += 1
        suffix = f"_{number}"
        name = sanitize(base)[: limit - len(suffix)] + suffix
    return name
