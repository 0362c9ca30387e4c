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
from itertools import repeat
from operator import itemgetter
from typing import Callable

from kprobe_tui.aggregate.model import Aggregation
from kprobe_tui.aggregate.tally import Tally
from kprobe_tui.stream.parser import FAULT, Event, LineParser

_COMM = itemgetter(slice(0, 16))
_PID = itemgetter(slice(17, 24))
_EVENT = re.compile(rb": (\w+): \(")
# Led by the "]" that closes the CPU column: a pattern led by a digit is tried at every digit of the line
# (pid, CPU, address: 4x slower, measured).
_TS_EVENT = re.compile(rb"\] \S+ +(\d+)\.(\d{6}): (\w+): \(")
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
        self._entries: dict = {}  # thread -> entry time (in us, or ms for --unit ms); lives across takes
        # Latency from microsecond timestamps: ms is the difference of ms clock readings, as the kernel's
        # common_timestamp/1000000 - $ts; ns is microseconds times 1000 (all trace_pipe prints).
        self._divisor = 1000 if aggregation.unit == "ms" else 1
        self._scale = 1000 if aggregation.unit == "ns" else 1
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
            now = round(event.ts * 1_000_000) // self._divisor
            if role.role == "entry":
                self._entries[thread] = now
            else:
                started = self._entries.pop(thread, None)
                if started is None:
                    unmatched += 1
                else:
                    rows[key + ((now - started) * self._scale,)] += 1
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

    # -- the fast path ---------------------------------------------------------------------------

    def _fast(self, data: bytes):
        """Rows of this block (an iterable for ``Counter.update``, which counts in C), or None when it does
        not fit. A row is a tuple of the columns' bytes, or the bytes alone for one column."""
        if self.latency:
            lines = data.split(b"\n")
            lines.pop()  # after the last newline: nothing
            return self._fast_latency(data, lines)
        count = data.count(b"\n")
        lines = None
        columns = []
        for name in self.columns:
            if name in ("comm", "pid") and name not in self._patterns:  # from the header: slices of each line
                if lines is None:
                    lines = data.split(b"\n")
                    lines.pop()
                columns.append(map(_COMM if name == "comm" else _PID, lines))
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
            return repeat((), count)
        return columns[0] if len(columns) == 1 else zip(*columns)

    def _fast_latency(self, data: bytes, lines: list[bytes]):
        stamps = _TS_EVENT.findall(data)
        if len(stamps) != len(lines):
            return None
        entry = self.entry.encode()
        entries = self._entries
        forget = entries.pop
        divisor = self._divisor
        unmatched = 0
        done: list = []
        keep = done.append
        threads = map(int, map(_PID, lines))  # int, as the general path keys threads: blocks may alternate
        if self.columns:
            columns = []
            for name in self.columns:
                if name in self._patterns:  # the probes' own $comm (entry and return capture it)
                    found = self._patterns[name].findall(data)
                    if len(found) != len(lines):
                        return None
                    columns.append(found)
                else:
                    columns.append(map(_COMM if name == "comm" else _PID, lines))
            keys = zip(*columns)
            for thread, (seconds, micros, name), key in zip(threads, stamps, keys):
                now = int(seconds + micros) // divisor
                if name == entry:
                    entries[thread] = now
                else:
                    started = forget(thread, None)
                    if started is None:
                        unmatched += 1
                    else:
                        keep(key + (now - started,))
        else:
            for thread, (seconds, micros, name) in zip(threads, stamps):
                now = int(seconds + micros) // divisor
                if name == entry:
                    entries[thread] = now
                else:
                    started = forget(thread, None)
                    if started is None:
                        unmatched += 1
                    else:
                        keep(now - started)
        with self._lock:
            self._unmatched += unmatched
        return done

    # -- output ----------------------------------------------------------------------------------

    def take(self) -> Tally:
        """What was aggregated since the previous take; text becomes values once per distinct row here."""
        with self._lock:
            fast, general, unmatched = self._fast_rows, self._rows, self._unmatched
            self._fast_rows, self._rows, self._unmatched = Counter(), Counter(), 0
        rows = general
        convert = self._converter()
        for row, hits in fast.items():
            converted = convert(row)
            if converted is not None:
                rows[converted] += hits
        tally = Tally(unmatched=unmatched)
        if self.aggregation.kind == "count":
            for row, hits in rows.items():
                tally.count(row, hits)
            return tally
        values: dict[tuple, Counter] = {}
        for row, hits in rows.items():
            found = values.get(row[:-1])
            if found is None:
                found = values[row[:-1]] = Counter()
            found[row[-1]] += hits
        for key, counted in values.items():
            tally.cell(key).add_values(counted)
        return tally

    def _converter(self) -> Callable[[object], tuple | None]:
        """Turns a fast-path row (bytes) into the tuple of values the general path makes."""
        parts = []
        for name in self.columns:
            if name == "comm":
                captured = "comm" in self._patterns  # else the header's, padded to 16
                parts.append(lambda raw, captured=captured: raw.decode("utf-8", "backslashreplace")
                             if captured else raw.decode("utf-8", "backslashreplace").strip())
            elif name == "pid":
                parts.append(int)
            elif name == "probe":
                labels = {role.event.encode(): role.label for role in self.roles.values()}
                parts.append(lambda raw, labels=labels: labels.get(raw, raw.decode()))
            else:
                parts.append(lambda raw: int(raw, 0))
        scale = self._scale
        scalar = len(parts) == 1 and not self.latency
        latency = self.latency

        def convert(row):
            try:
                if scalar:
                    return (parts[0](row),)
                if latency and not parts:
                    return (row * scale,)
                values = tuple(part(raw) for part, raw in zip(parts, row))
                return values + (row[-1] * scale,) if latency else values
            except ValueError:
                return None

        return convert
