"""The user-space aggregator: trace_pipe text of our own probes in, a ``Tally`` out.

The reader hands over whole lines as bytes. Building an ``Event`` per line caps a Python reader
at a few hundred thousand events a second; most of a line is not needed for an answer. So each
block goes through a fast path when it can (``benchmarks/bench_aggregate.py`` measures both):

* the header is fixed width: the comm right-aligned in 16 columns, ``-``, the pid in 7
  (``%16s-%-7d``), so comm and pid are slices, taken in C by ``map(itemgetter(slice))``;
* an argument is found by a regex that starts with a literal (`` len=``), which the regex engine
  scans for fast; our probes capture numbers before any string, so a string cannot fake one;
* rows are counted by ``Counter`` in C; text becomes numbers once per distinct row, at ``take()``.

A block that does not fit (a lost-events marker, a fault, a view-side filter, an event that is not
ours) goes through ``LineParser`` and the same model per ``Event``: the general path, which gives
the same answer (the unit tests compare the two on the same text).

Latency pairs each return with the entry of its thread, read once: a nested call's entry replaces
the outer one's and the outer return finds none (``unmatched``), exactly as the kernel engine's
hist variables behave, so both engines time the same calls. Timestamps in trace_pipe have
microsecond resolution: nanosecond latencies from this engine are multiples of 1000.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from dataclasses import dataclass
from operator import itemgetter
from typing import Callable

from kprobe_tui.aggregate.model import Aggregation
from kprobe_tui.aggregate.tally import Tally
from kprobe_tui.stream.parser import FAULT, Event, LineParser

_COMM = itemgetter(slice(0, 16))
_PID = itemgetter(slice(17, 24))
_EVENT = re.compile(rb": (\w+): \(")
_TS_EVENT = re.compile(rb"(\d+)\.(\d{6}): (\w+): \(")
_NUMBER = rb"(-?(?:0x[0-9a-fA-F]+|\d+))"


@dataclass(frozen=True)
class EventRole:
    """One of our events as the aggregator sees it."""

    event: str  # the name the kernel prints
    label: str  # what the ``probe`` key shows (the function)
    role: str = "hit"  # hit, entry, return
    view_filter: Callable[[Event], bool] | None = None  # what of the filter the kernel could not apply


class StreamAggregator:
    """Feed blocks of whole lines (reader thread); ``take()`` what came since the last take (any thread)."""

    def __init__(self, aggregation: Aggregation, roles: list[EventRole], arguments: dict[str, str],
                 fast: bool = True) -> None:
        """``arguments``: model field name -> the captured argument's name in the event."""
        self.aggregation = aggregation
        self.roles = {role.event: role for role in roles}
        self.arguments = arguments
        self.latency = aggregation.kind == "latency"
        self.entry = next((r.event for r in roles if r.role == "entry"), None)
        self.fast = fast and not any(r.view_filter for r in roles)
        columns = [key.name for key in aggregation.keys]
        if aggregation.kind == "hist":
            columns.append(aggregation.value.name)
        self.columns = columns
        self._patterns = {name: re.compile(rb" " + re.escape(arguments[name].encode()) + rb"=" + _NUMBER)
                          for name in columns if name in arguments and name != "comm"}
        if "comm" in arguments:  # the probe's own $comm, captured last: the rest of the line
            self._patterns["comm"] = re.compile(rb" " + re.escape(arguments["comm"].encode()) + rb'="(.*)"$', re.M)
        self._one_event = len(roles) == 1
        self._parser = LineParser()
        self._lock = threading.Lock()
        self._fast_rows: Counter = Counter()  # rows of bytes (slices, matched text)
        self._rows: Counter = Counter()  # rows of values from Events
        self._unmatched = 0
        self._entries: dict = {}  # thread -> entry time (us); lives across takes
        self.fast_blocks = 0
        self.general_blocks = 0

    def set_view_filter(self, event: str, predicate: Callable[[Event], bool]) -> None:
        """Apply ``predicate`` to ``event`` here (the kernel could not): its blocks take the general path."""
        role = self.roles[event]
        self.roles[event] = EventRole(role.event, role.label, role.role, predicate)
        self.fast = False

    # -- input ---------------------------------------------------------------------------------

    def feed(self, data: bytes) -> None:
        """Whole lines (ending in a newline) from our instance's trace_pipe."""
        if not data:
            return
        if self.fast and b"[LOST " not in data:
            rows = self._fast(data)
            if rows is not None:
                with self._lock:
                    self._fast_rows.update(rows)
                self.fast_blocks += 1
                return
        self.general_blocks += 1
        events = self._parser.feed(data.decode("utf-8", "backslashreplace").split("\n"))
        self.add_events(events + self._parser.flush())

    def add_events(self, events: list[Event]) -> None:
        """The general path: parsed events (also what a view on existing events would use)."""
        rows: Counter = Counter()
        unmatched = 0
        for event in events:
            role = self.roles.get(event.event)
            if role is None or (role.view_filter is not None and not role.view_filter(event)):
                continue
            key = self._event_key(event, role)
            if key is None:
                continue
            if not self.latency:
                rows[key] += 1
                continue
            thread = event.pid
            now = round(event.ts * 1_000_000)
            if role.role == "entry":
                self._entries[thread] = now
            else:
                started = self._entries.pop(thread, None)
                if started is None:
                    unmatched += 1
                else:
                    rows[key + (self._latency(started, now),)] += 1
        with self._lock:
            self._rows.update(rows)
            self._unmatched += unmatched

    def _event_key(self, event: Event, role: EventRole) -> tuple | None:
        key = []
        args = None
        for name in self.columns:
            if name == "comm" and "comm" not in self.arguments:
                key.append(event.comm)
            elif name == "pid":
                key.append(event.pid)
            elif name == "probe":
                key.append(role.label)
            else:
                args = args if args is not None else event.args
                value = args.get(self.arguments.get(name, name))
                if value is None or value is FAULT:
                    return None
                key.append(int(value) if isinstance(value, int) else value)
        return tuple(key)

    def _latency(self, started_us: int, ended_us: int) -> int:
        unit = self.aggregation.unit
        if unit == "ms":
            return ended_us // 1000 - started_us // 1000  # as the kernel: the difference of ms clock readings
        return (ended_us - started_us) * (1000 if unit == "ns" else 1)

    # -- the fast path ---------------------------------------------------------------------------

    def _fast(self, data: bytes):
        lines = data.split(b"\n")
        if lines and not lines[-1]:
            lines.pop()
        count = len(lines)
        if self.latency:
            return self._fast_latency(data, lines)
        columns = []
        for name in self.columns:
            if name == "comm" and "comm" not in self._patterns:
                columns.append(map(_COMM, lines))
            elif name == "pid":
                columns.append(map(_PID, lines))
            elif name == "probe":
                found = [next(iter(self.roles)).encode()] * count if self._one_event else _EVENT.findall(data)
                if len(found) != count:
                    return None
                columns.append(found)
            else:
                found = self._patterns[name].findall(data)
                if len(found) != count:
                    return None
                columns.append(found)
        if not self._one_event and "probe" not in self.columns:
            names = _EVENT.findall(data)
            if len(names) != count or any(name.decode() not in self.roles for name in set(names)):
                return None
        if not columns:
            return Counter({(): count})
        if len(columns) == 1:
            return Counter(zip(columns[0]))
        return Counter(zip(*columns))

    def _fast_latency(self, data: bytes, lines: list[bytes]):
        stamps = _TS_EVENT.findall(data)
        if len(stamps) != len(lines):
            return None
        entry = self.entry.encode()
        key_columns = [map(_COMM, lines) if name == "comm" else map(_PID, lines) for name in self.columns]
        keys = zip(*key_columns) if key_columns else iter(((),) * len(lines))
        rows: Counter = Counter()
        unmatched = 0
        entries = self._entries
        latency = self._latency
        for pid, (seconds, micros, name), key in zip(map(_PID, lines), stamps, keys):
            now = int(seconds) * 1_000_000 + int(micros)
            thread = int(pid)  # the general path keys threads by int too: blocks may alternate
            if name == entry:
                entries[thread] = now
            else:
                started = entries.pop(thread, None)
                if started is None:
                    unmatched += 1
                else:
                    rows[key + (latency(started, now),)] += 1
        with self._lock:
            self._unmatched += unmatched
        return rows

    # -- output ----------------------------------------------------------------------------------

    def take(self) -> Tally:
        """What was aggregated since the previous take."""
        with self._lock:
            fast, general, unmatched = self._fast_rows, self._rows, self._unmatched
            self._fast_rows, self._rows, self._unmatched = Counter(), Counter(), 0
        tally = Tally(unmatched=unmatched)
        for row, hits in general.items():
            self._add(tally, row, hits)
        for row, hits in fast.items():
            converted = self._convert(row)
            if converted is not None:
                self._add(tally, converted, hits)
        return tally

    def _add(self, tally: Tally, row: tuple, hits: int) -> None:
        if self.aggregation.kind == "count":
            tally.count(row, hits)
        else:
            tally.cell(row[:-1]).add_values(Counter({row[-1]: hits}))

    def _convert(self, row: tuple) -> tuple | None:
        """A fast-path row (bytes) as the values the general path makes."""
        values = []
        for name, raw in zip(self.columns, row):
            if name == "comm":
                text = raw.decode("utf-8", "backslashreplace")
                values.append(text if "comm" in self._patterns else text.strip())  # the header pads it to 16
            elif name == "pid":
                try:
                    values.append(int(raw))
                except ValueError:
                    return None
            elif name == "probe":
                role = self.roles.get(raw.decode())
                values.append(role.label if role else raw.decode())
            else:
                values.append(int(raw, 0))
        if self.latency:
            values.append(row[-1])  # already a number
        return tuple(values)
