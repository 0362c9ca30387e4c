"""Names for the events the kernel prints as ``<...>``: a process traced before it was ever switched out.

The text output looks each event's comm up by pid in saved_cmdlines, where the kernel saves a task's
name only at its next context switch after an event. A reader as quick as ours reaches the first
events of a new process before that switch: a short program's first 8 of 18 uprobe hits came as
``<...>`` (tests/tui/test_lab_walk.py), and a filter ``comm == "lab_walk"`` hid them. The name is
then taken from the same pid's other events (this batch's, or an earlier batch's that had to be named),
from ``/proc/<pid>/comm`` while it lives, or from saved_cmdlines once it has switched out (the kernel's
own answer, a moment later).
"""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter

from kprobe_tui.stream.parser import Event

UNKNOWN_COMM = "<...>"
COMM_BYTES = 15  # TASK_COMM_LEN less its NUL: what the kernel saves (/proc gives a kernel thread's whole name)
REMEMBERED = 4096  # pids whose name is kept: a machine's busy processes, not every short-lived one
_COMM = itemgetter(Event._fields.index("comm"))  # a tuple index: the scan stays in C


class CommNames:
    """Gives ``<...>`` events the name of their pid, when anything knows it (else they stay ``<...>``)."""

    def __init__(self, read_saved_cmdlines: Callable[[], str], proc: str = "/proc") -> None:
        self._read_saved_cmdlines = read_saved_cmdlines
        self._proc = proc
        self._known: dict[int, str] = {}

    def name(self, events: list[Event]) -> list[Event]:
        """``events``, the unnamed ones named where their pid's name is known.

        On the reader's hot path: a batch with every name known costs one scan (36 ns an event, against
        176 ns when every batch was learned from; the whole text reader takes ~5.8 us an event), and
        only a batch with an unnamed event is learned from."""
        if UNKNOWN_COMM not in map(_COMM, events):
            return events
        known = self._known
        known.update((event.pid, event.comm) for event in events if event.comm != UNKNOWN_COMM)
        if len(known) > REMEMBERED:
            for pid in list(known)[: len(known) - REMEMBERED]:
                del known[pid]
        saved: dict[int, str] | None = None
        named = []
        for event in events:
            if event.comm == UNKNOWN_COMM:
                comm = known.get(event.pid) or proc_comm(event.pid, self._proc)
                if comm is None:
                    saved = self._saved() if saved is None else saved
                    comm = saved.get(event.pid)
                if comm is not None:
                    known[event.pid] = comm
                    event = event._replace(comm=comm)
            named.append(event)
        return named

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


def proc_comm(pid: int, proc: str = "/proc") -> str | None:
    """A living task's name as the kernel saves it for the text (None once it has exited)."""
    try:
        with open(f"{proc}/{pid}/comm", "rb") as file:
            name = file.read(64).rstrip(b"\n")[:COMM_BYTES]
    except OSError:
        return None
    return name.decode("utf-8", "backslashreplace") or None


def proc_tgid(pid: int, proc: str = "/proc") -> int | None:
    """A living task's thread group (its process) id, as the kernel saves it for the text (None once it has exited)."""
    try:
        with open(f"{proc}/{pid}/status", "rb") as file:
            status = file.read(4096)
    except OSError:
        return None
    at = status.find(b"\nTgid:")
    line = status[at + 6:status.find(b"\n", at + 1)].strip() if at >= 0 else b""
    return int(line) if line.isdigit() else None


def saved_comm(saved_cmdlines: bytes, pid: int) -> str | None:
    """The name saved_cmdlines (each ``PID COMM`` line after a newline) holds for ``pid``, if any."""
    key = b"\n%d " % pid
    at = saved_cmdlines.find(key)
    if at < 0:
        return None
    end = saved_cmdlines.find(b"\n", at + 1)
    return saved_cmdlines[at + len(key):end if end >= 0 else None].decode("utf-8", "backslashreplace") or None
