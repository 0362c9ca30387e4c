"""Parse the text lines of a tracefs ``trace_pipe`` into events.

The kernel prints each event as ``comm-pid [ (tgid)] [cpu] flags timestamp: event: body``.
``comm`` may hold spaces and dashes: it ends at the first ``-<pid>`` that the CPU column
follows. The body (probe site and ``name=value`` arguments) is kept as text and split into
typed values only when asked for: a flood is stored far more often than it is looked at.
Lines that fit nothing are kept raw and counted, never raised.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NamedTuple

# pids and cpus are a few digits: a longer run is no header (and int() refuses more than 4300 digits)
HEADER = re.compile(
    r" *(?P<comm>.*?)-(?P<pid>\d{1,10}) +(?:\( *(?P<tgid>\d{1,10}|-+)\) +)?\[(?P<cpu>\d{1,10})\] +"
    r"(?:(?P<flags>[^ ]{4,6}) +)?(?P<ts>\d+\.\d+): (?P<event>[^ :]+): ?(?P<body>.*)"
)
LOST = re.compile(r"CPU:(?P<cpu>\d+) \[LOST (?P<count>\d{1,20}) EVENTS\]")
# One argument: a string runs to the quote that is followed by the next ``name=`` or the end
# (the kernel does not escape quotes inside strings), an array to its brace, else to a space.
ARG = re.compile(r"([A-Za-z_][\w.]*)=(\"(?:.*?)\"(?= [A-Za-z_][\w.]*=|$)|\{[^}]*\}|'(?:\\.|[^'])*'|\(fault\)|[^ ]*)", re.S)
SITE = re.compile(r"\((?P<site>[^()]*)\)")
_BARE_HEX = re.compile(r"[0-9a-f]+")
STACK_EVENTS = ("<stack trace>", "<user stack trace>")
_CPU = re.compile(r" \[(\d{1,10})\] ")


class Fault:
    """The kernel could not fetch this argument (printed ``(fault)``)."""

    def __repr__(self) -> str:
        return "(fault)"

    def __str__(self) -> str:
        return "(fault)"


FAULT = Fault()


class Hex(int):
    """An integer the kernel printed in hex, shown back in hex."""

    def __str__(self) -> str:
        return hex(self) if self >= 0 else f"-{hex(-self)}"

    __repr__ = __str__


class Event(NamedTuple):
    """One trace event. A tuple of plain values, with no cycles: the collector still tracks it (it untracks
    exact tuples only), so a big store collects young objects less often (stream/store.py). ``args`` and
    ``site`` are split from ``body`` when asked for."""

    ts: float
    cpu: int
    pid: int
    tgid: int | None
    comm: str
    flags: str
    event: str  # "" for a line kept raw (``body`` holds it)
    body: str
    stack: tuple[str, ...] | None = None

    @property
    def site(self) -> str:
        match = SITE.match(self.body)
        return match["site"] if match else ""

    @property
    def args(self) -> dict[str, object]:
        """Arguments by name, typed: int (Hex when printed in hex), str, list, or FAULT."""
        return parse_args(self.body)

    def field(self, name: str):
        """A header field or an argument by name (None when this event has no such field)."""
        if name in HEADER_FIELDS:
            return getattr(self, "ts" if name == "time" else name)
        return self.args.get(name)

    def as_dict(self) -> dict:
        record = {"time": self.ts, "cpu": self.cpu, "comm": self.comm, "pid": self.pid, "tgid": self.tgid,
                  "flags": self.flags, "event": self.event, "site": self.site,
                  "args": {k: (None if v is FAULT else v) for k, v in self.args.items()}}
        if self.stack is not None:
            record["stack"] = list(self.stack)
        return record


HEADER_FIELDS = frozenset({"time", "ts", "cpu", "pid", "tgid", "comm", "flags", "event", "site", "body"})


def typed(text: str):
    """A printed argument as a Python value: ``"s"`` str, ``'c'`` str, ``{a,b}`` list, ints, FAULT."""
    if not text:
        return text
    head = text[0]
    if head == '"' and len(text) >= 2 and text[-1] == '"':
        return text[1:-1]
    if head == "'" and len(text) >= 3 and text[-1] == "'":
        return text[1:-1]
    if head == "{" and text[-1] == "}":
        return [typed(part) for part in text[1:-1].split(",")] if len(text) > 2 else []
    if text == "(fault)":
        return FAULT
    try:
        return int(text, 10)
    except ValueError:
        pass
    if text.startswith(("0x", "-0x")) or _BARE_HEX.fullmatch(text):
        # bare hex is how older kprobes print untyped registers (``arg1=ffffffff``); strings and
        # chars come quoted, symbols as ``sym+off/size``, so a bare word is a number
        try:
            return Hex(text, 16)
        except ValueError:
            pass
    return text


def parse_args(body: str) -> dict[str, object]:
    """The ``name=value`` arguments after the probe site."""
    site = SITE.match(body)
    rest = body[site.end():] if site else body
    return {name: typed(value) for name, value in ARG.findall(rest)}


@dataclass
class ParseCounts:
    events: int = 0
    garbled: int = 0  # lines kept raw: cut short, or not an event line at all
    continued: int = 0  # lines that continued a string holding a newline
    lost_lines: int = 0  # ``CPU:n [LOST k EVENTS]`` markers printed by trace_pipe
    lost_events: int = 0


class LineParser:
    """Turns lines into events, keeping state across chunks.

    The newest event is held back until the next line shows it is complete: the kernel prints an
    event's stack trace, or the rest of a string holding a newline, on the lines after it.
    ``flush_if_quiet()`` hands it over once a read brought nothing after it; ``flush()`` at the end.
    A stack goes to the newest event of its own CPU: the text merges the CPUs' records by time, and a stack,
    stamped after its event, may come after another CPU's event (1 run in 3 of tests/live/test_rawpages.py's
    stacks test gave a uretprobe's stack to the next CPU's event, which got its own after it).
    """

    def __init__(self) -> None:
        self.counts = ParseCounts()
        self._pending: tuple | None = None  # the newest event's fields, without its stack
        self._frames: list[str] | None = None  # its stack, while the stack lines come in
        self._late: int | None = None  # where in this feed's events the stack whose lines come in goes, if not pending
        self._names: dict[str, str] = {}  # interned comm/event/flags: a flood repeats a handful of them
        self._fed = False  # lines came since the last flush_if_quiet()

    def feed(self, lines: list[str]) -> list[Event]:
        """Events completed by ``lines``; garbled lines come back as raw events (``event == ""``)."""
        out: list[Event] = []
        self._fed = True
        self._late = None
        match_header = HEADER.fullmatch
        names = self._names
        intern = names.setdefault
        for line in lines:
            m = match_header(line)
            if m is None:
                self._other(line, out)
                continue
            self._late = None
            if self._pending is not None:
                out.append(self._finish())
            comm, pid, tgid, cpu, flags, ts, event, body = m.groups()
            pid_value = int(pid)
            if tgid is None or tgid[0] == "-":
                tgid_value = None
            else:
                tgid_value = pid_value if tgid == pid else int(tgid)
            self._pending = (float(ts), int(cpu), pid_value, tgid_value, intern(comm, comm),
                             intern(flags or "", flags or ""), intern(event, event), body)
        return out

    def flush(self) -> list[Event]:
        """The held-back event, if any (call when no more lines will come)."""
        return [] if self._pending is None else [self._finish()]

    def flush_if_quiet(self) -> list[Event]:
        """The held-back event once a whole read since the last call brought no line (call after each read).

        The kernel writes an event's stack trace as a record of its own, committed just after the event's:
        a reader that empties the buffer between the two would hand the event over without its stack
        (seen once in a full suite run), so the event waits for one more read.
        """
        quiet, self._fed = not self._fed, False
        return self.flush() if quiet else []

    @staticmethod
    def _newest_of_cpu(out: list[Event], cpu: int) -> int | None:
        for at in range(len(out) - 1, -1, -1):
            if out[at].cpu == cpu and out[at].event:
                return at if out[at].stack is None else None
        return None

    def _finish(self) -> Event:
        fields, frames = self._pending, self._frames
        self._pending = self._frames = None
        self.counts.events += 1
        assert fields is not None  # a pending event is what is being finished
        return tuple.__new__(Event, fields + (tuple(frames) if frames is not None else None,))

    def _other(self, line: str, out: list[Event]) -> None:
        pending = self._pending
        if line.startswith(" => ") and (self._late is not None or self._frames is not None):
            if self._late is not None:
                event = out[self._late]
                out[self._late] = event._replace(stack=(*(event.stack or ()), line[4:].strip()))
            elif self._frames is not None:
                self._frames.append(line[4:].strip())
            return
        self._late = None
        if line.endswith(STACK_EVENTS):
            cpu = _CPU.search(line)
            if pending is not None and (cpu is None or int(cpu[1]) == pending[1]):
                self._frames = []  # the kernel prints an event's stack right after the event
            elif cpu is not None:
                self._late = self._newest_of_cpu(out, int(cpu[1]))  # None: its event went in an earlier read
            return
        lost = LOST.search(line)
        if lost:
            self.counts.lost_lines += 1
            self.counts.lost_events += int(lost["count"])
            return
        if not line.strip():
            return
        if pending is not None and self._frames is None and pending[7].count('"') % 2 == 1:
            self._pending = pending[:7] + (pending[7] + "\n" + line,)  # a string argument that held a newline
            self.counts.continued += 1
            return
        if pending is not None:
            out.append(self._finish())
        self.counts.garbled += 1
        out.append(Event(0.0, -1, 0, None, "", "", "", line))
