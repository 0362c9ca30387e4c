"""Return values in a call graph where the tracer gives none: a return probe (``$retval``) on each function seen.

The function_graph tracer prints return values only with ``funcgraph-retval`` (6.5+, built with
CONFIG_FUNCTION_GRAPH_RETVAL), which Debian's 6.12 is built without (its ``options/`` has no such file)
and 6.1 predates. A return probe enabled in the same top-level buffer prints its event among the graph's
lines, as a comment of the thread that returned (``/* r6_do_filp_open: (do_sys_openat2+0xab/0xe0 <- do_filp_open)
ret=0xfffffffffffffffe */``, the 6.12 guest's), which ``stream.callgraph`` gives to the call it ends.

Which functions: before the calls, FUNC and the callees its machine code names (kernel/callees.py), shallowest
first; then any other callee once a finished call has shown it (a call through a pointer); up to MAX_RETURN_PROBES.
A return probe fires on every thread, inside FUNC or not, so each is filtered to the graphed threads
(or away from ours, the golden rule) and the whole lot is opt-in (``graph --retval``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from kprobe_tui.errors import UserError
from kprobe_tui.kernel import lifetime
from kprobe_tui.kernel.btf import Btf
from kprobe_tui.kernel.definition import MAX_EVENT_NAME_LEN, sanitize
from kprobe_tui.kernel.events import DynamicEvent, Events
from kprobe_tui.kernel.funcgraph import FUNCTION_NAME
from kprobe_tui.kernel.tracefs import Tracefs

MAX_RETURN_PROBES = 64  # each is a kretprobe on every call of its function, system-wide
_EVENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
RETURN_FIELD = "ret"


@dataclass(frozen=True)
class ReturnProbe:
    """``r:GROUP/EVENT FUNCTION ret=$retval:x64``, the one line a return value needs (a ProbeDefinition)."""

    group: str
    event: str
    function: str
    filter: str | None
    prefix: str = "r"
    control_file: str = "kprobe_events"
    is_uprobe: bool = False

    def definition(self) -> str:
        return f"r:{self.group}/{self.event} {self.function} {RETURN_FIELD}=$retval:x64"

    def check(self) -> ReturnProbe:
        if not (FUNCTION_NAME.fullmatch(self.function) and _EVENT.fullmatch(self.event) and _EVENT.fullmatch(self.group)):
            raise UserError(f"cannot probe the return of {self.function!r} as {self.group}/{self.event}")
        return self


def graphed_name(name: str) -> str:
    """The function of a graph's ``name [module]``: what a probe and a return event are matched by."""
    return name.split(" [", 1)[0]


class ReturnProbes:
    """The run's return probes, made as names come, removed by ``remove()`` (or the run's undo)."""

    def __init__(self, top: Tracefs, pids: Iterable[int], our_threads: Iterable[int]) -> None:
        self.top = top
        self.events = Events(top)
        self.group = lifetime.run_name()
        pids = list(pids)
        self.filter = " || ".join(f"common_pid == {pid}" for pid in pids) if pids else \
            " && ".join(f"common_pid != {tid}" for tid in our_threads) or None
        self.functions: dict[str, str] = {}  # event name -> function, shared with the graph's reader
        self.refused: list[str] = []  # functions the kernel would not probe (notrace, blacklisted, ...)
        self.void: list[str] = []  # functions that return nothing (BTF says): no probe, their rax is not a value
        self._btf = _vmlinux_btf()
        self.past_cap = 0  # names seen after MAX_RETURN_PROBES were made
        self._tried: set[str] = set()
        self._made: list[DynamicEvent] = []

    def add(self, names: Iterable[str]) -> None:
        for name in map(graphed_name, names):
            if name in self._tried:
                continue
            self._tried.add(name)
            if self._btf is not None and self._btf.has_function(name) and self._btf.return_type(name) == 0:
                self.void.append(name)  # 6.12 refuses $retval there itself; 6.1 would print a leftover register
                continue
            if len(self.functions) >= MAX_RETURN_PROBES:
                self.past_cap += 1
                continue
            event = f"r{len(self._tried)}_{sanitize(name)}"[:MAX_EVENT_NAME_LEN]
            try:
                self._made += self.events.create([ReturnProbe(self.group, event, name, self.filter)], run_scoped=True)
                self.events.enable(self.group, event)
            except UserError:
                self.refused.append(name)
                continue
            self.functions[event] = name

    def remove(self) -> None:
        made, self._made = self._made, []
        for event in made:
            self.events.delete(event)


def _vmlinux_btf() -> Btf | None:
    try:
        return Btf.shared()
    except (UserError, OSError):
        return None
