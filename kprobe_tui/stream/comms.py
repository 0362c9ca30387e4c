"""Names for the events the kernel prints as ``<...>``: a process traced before it was ever switched out.

The text output looks each event's comm up by pid in saved_cmdlines, where the kernel saves a task's
name only at its next context switch after an event. A reader as quick as ours reaches the first
events of a new process before that switch: a short program's first 8 of 18 uprobe hits came as
``<...>`` (tests/tui/test_lab_walk.py), and a filter ``comm == "lab_walk"`` hid them. The name is
then taken from the same pid's later events, from ``/proc/<pid>/comm`` while it lives, or from
saved_cmdlines once it has switched out (the kernel's own answer, a moment later).
"""

from __future__ import annotations

from collections.abc import Callable

from kprobe_tui.stream.parser import Event

UNKNOWN_COMM = "<...>"
REMEMBERED = 4096  # pids whose name is kept: a machine's busy processes, not every short-lived one


class CommNames:
    """Gives ``<...>`` events the name of their pid, when anything knows it (else they stay ``<...>``)."""

    def __init__(self, read_saved_cmdlines: Callable[[], str], proc: str = "/proc") -> None:
        self._read_saved_cmdlines = read_saved_cmdlines
        self._proc = proc
        self._known: dict[int, str] = {}

    def name(self, events: list[Event]) -> list[Event]:
        """``events``, the unnamed ones named where their pid's name is known."""
        known = self._known
        for event in events:
            if event.comm != UNKNOWN_COMM:
                known[event.pid] = event.comm
        if len(known) > REMEMBERED:
            for pid in list(known)[: len(known) - REMEMBERED]:
                del known[pid]
        if not any(event.comm == UNKNOWN_COMM for event in events):
            return events
        saved: dict[int, str] | None = None
        named = []
        for event in events:
            if event.comm == UNKNOWN_COMM:
                comm = known.get(event.pid) or self._from_proc(event.pid)
                if comm is None:
                    saved = self._saved() if saved is None else saved
                    comm = saved.get(event.pid)
                if comm is not None:
                    known[event.pid] = comm
                    event = event._replace(comm=comm)
            named.append(event)
        return named

    def _from_proc(self, pid: int) -> str | None:
        try:
            with open(f"{self._proc}/{pid}/comm", "rb") as file:
                return file.read(64).decode("utf-8", "backslashreplace").rstrip("\n") or None
        except OSError:
            return None

    def _saved(self) -> dict[int, str]:
        """saved_cmdlines as pid -> name (lines ``PID COMM``; unreadable: nothing)."""
        try:
            text = self._read_saved_cmdlines()
        except OSError:
            return {}
        saved = {}
        for line in text.splitlines():
            pid, _, comm = line.partition(" ")
            if pid.isdigit() and comm:
                saved[int(pid)] = comm
        return saved
