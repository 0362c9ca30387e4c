"""Parse the text lines of a tracefs ``trace_pipe`` into events.

The kernel prints each event as ``comm-pid [ (tgid)] [cpu] flags timestamp: event: body``.
``comm`` may hold spaces and dashes, so the header is matched from the right-hand columns
inward. The body (probe site and ``name=value`` arguments) is kept as text and split into
typed values only when asked for: a flood is stored far more often than it is looked at.
Lines that fit nothing are kept raw and counted, never raised.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

HEADER = re.compile(
    r" *(?P<comm>.*?)-(?P<pid>\d+) +(?:\( *(?P<tgid>\d+|-+)\) +)?\[(?P<cpu>\d+)\] +"
    r"(?:(?P<flags>[^ ]{4,6}) +)?(?P<ts>\d+\.\d+): (?P<event>[^ :]+): ?(?P<body>.*)"
)
LOST = re.compile(r"CPU:(?P<cpu>\d+) \[LOST (?P<count>\d+) EVENTS\]")
# One argument: a string runs to the quote that is followed by the next ``name=`` or the end
# (the kernel does not escape quotes inside strings), an array to its brace, else to a space.
ARG = re.compile(r"([A-Za-z_][\w.]*)=(\"(?:.*?)\"(?= [A-Za-z_][\w.]*=|$)|\{[^}]*\}|'(?:\\.|[^'])*'|\(fault\)|[^ ]*)", re.S)
SITE = re.compile(r"\((?P<site>[^()]*)\)")
STACK_EVENTS = ("<stack trace>", "<user stack trace>")


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


@dataclass(slots=True)
class Event:
    """One trace event; ``args`` and ``site`` are split from ``body`` on first use."""

    ts: float
    cpu: int
    pid: int
    tgid: int | None
    comm: str
    flags: str
    event: str
    body: str
    stack: list[str] | None = None
    _args: dict | None = field(default=None, repr=False)

    @property
    def site(self) -> str:
        match = SITE.match(self.body)
        return match["site"] if match else ""

    @property
    def args(self) -> dict[str, object]:
        """Arguments by name, typed: int, str, list, or FAULT."""
        if self._args is None:
            self._args = parse_args(self.body)
        return self._args

    def field(self, name: str):
        """A header field or an argument by name (None when this event has no such field)."""
        if name in HEADER_FIELDS:
            return getattr(self, "ts" if name == "time" else name)
        return self.args.get(name)

    def as_dict(self) -> dict:
        record = {"time": self.ts, "cpu": self.cpu, "comm": self.comm, "pid": self.pid, "tgid": self.tgid,
                  "flags": self.flags, "event": self.event, "site": self.site,
                  "args": {k: (None if v is FAULT else v) for k, v in self.args.items()}}
        if self.stack:
            record["stack"] = self.stack
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
    try:
        # 0x-prefixed, or bare hex as kprobes print untyped registers (``arg1=ffff8800``)
        return Hex(text, 16)
    except ValueError:
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
    """Turns lines into events, keeping state across chunks (stack lines, multi-line strings)."""

    def __init__(self) -> None:
        self.counts = ParseCounts()
        self._last: Event | None = None
        self._names: dict[str, str] = {}  # interned comm/event/flags: a flood repeats a handful of them

    def _intern(self, text: str) -> str:
        return self._names.setdefault(text, text)

    def feed(self, lines: list[str]) -> list[Event]:
        """Events completed by ``lines``; garbled lines come back as raw events (``event == ""``)."""
        out: list[Event] = []
        match_header = HEADER.fullmatch
        intern = self._intern
        counts = self.counts
        for line in lines:
            m = match_header(line)
            if m is not None:
                tgid = m["tgid"]
                ev = Event(float(m["ts"]), int(m["cpu"]), int(m["pid"]),
                           int(tgid) if tgid and tgid[0] != "-" else None,
                           intern(m["comm"]), intern(m["flags"] or ""), intern(m["event"]), m["body"])
                out.append(ev)
                self._last = ev
                counts.events += 1
                continue
            self._other(line, out)
        return out

    def _other(self, line: str, out: list[Event]) -> None:
        last = self._last
        if line.startswith(" => ") and last is not None and last.stack is not None:
            last.stack.append(line[4:].strip())
            return
        if line.endswith(STACK_EVENTS):
            if last is not None:
                last.stack = []  # the kernel prints an event's stack right after the event
            return
        lost = LOST.search(line)
        if lost:
            self.counts.lost_lines += 1
            self.counts.lost_events += int(lost["count"])
            return
        if not line.strip():
            return
        if last is not None and last.body.count('"') % 2 == 1:
            last.body += "\n" + line  # a string argument that held a newline
            last._args = None
            self.counts.continued += 1
            return
        self.counts.garbled += 1
        self._last = None
        out.append(Event(0.0, -1, 0, None, "", "", "", line))
