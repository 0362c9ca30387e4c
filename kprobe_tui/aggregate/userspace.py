"""The user-space aggregator: trace_pipe text of our own probes in, a ``Tally`` out.

The reader hands over whole lines as bytes. Building an ``Event`` per line caps a Python reader
at a few hundred thousand events a second; most of a line is not needed for an answer. So each
block goes through a fast path when it can, where the work per line is done in C: one
``bytes.split``, a slice or one regex ``findall`` per column over the whole block, ``map`` and
``Counter`` over the columns (``benchmarks/bench_aggregate.py`` measures both paths):

* the header is fixed width: the comm right-aligned in 16 columns, ``-``, the pid in 7
  (``%16s-%-7d``), so comm and pid are slices, taken in C by ``map(itemgetter(slice))``; so is
  the timestamp, at the columns the block's first line shows, once every line is checked to have
  its ``:`` there;
* a captured comm is the rest of the line from ``kptui_comm="`` on: a slice when every line prints
  the same text before it (``_comms_in_place``), else a regex; a comm read that contains the name may
  have begun at a copy of it (``_misread_comm``); a histogram by comm reads value and comm in one
  regex pass;
* an argument is found by a regex led by its name (``len=``): a literal the regex engine scans for
  (led by a space, it stops at every space of the padded header: 1.2-1.6x slower, measured);
  a number must end at a space or the line's end, and each line must give exactly one match, so
  another argument whose name ends the same (``buflen``) sends the block down the general path;
* counts are rows counted by ``Counter``, text becoming values once per distinct row at ``take()``;
  a histogram's values (and latencies) are bucketed as they come, a block at a time
  (``Log2.counts``/``Linear.counts``), with their sum and extremes: a table of 100k distinct values
  would cost a hash lookup that misses the cache on every line (measured 1.3-2x slower).

A block that does not fit (a lost-events marker, a fault, a view-side filter, an event that is not
ours) goes through ``LineParser`` and the same model per ``Event``: the general path, which gives
the same answer (the unit tests compare the two on the same text).

Latency pairs each return with the entry of its thread, read once: a nested call's entry replaces
the outer one's and the outer return finds none (``unmatched``), exactly as the kernel engine's
hist variables behave, so both engines time the same calls. Pairing needs the order of a thread's
events: one Python loop over the block's (thread, role, stamp) columns, nothing else per line;
a key (comm, pid) is read on the returns' lines only.
Timestamps in trace_pipe have microsecond resolution: nanosecond latencies from this engine are
multiples of 1000.
"""

from __future__ import annotations

import re
import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import compress, repeat
from operator import floordiv, itemgetter, mul, not_

from kprobe_tui.aggregate.model import Aggregation
from kprobe_tui.aggregate.tally import Cell, Tally
from kprobe_tui.stream.parser import FAULT, Event, LineParser

_COMM = itemgetter(slice(0, 16))
_PID = itemgetter(slice(17, 24))
_EVENT = re.compile(rb": (\w+): \(")
# A number as the kernel prints integer types (decimal, or 0x hex for x8..x64), ending the argument:
# an old kernel's bare hex ("ffff9e2b") is no number here and its block takes the general path.
_NUMBER = rb"(-?(?:0x[0-9a-fA-F]+|\d+))(?=[ \n])"
# The timestamp (its padding included: float() skips it) after the CPU column and the flags.
_STAMP = re.compile(rb"\] \S+ ( *\d+\.\d{6}): ")
_MAX_MARKERS = 256  # distinct texts after a timestamp judged per run (a probe site beyond the name varies)


@dataclass(frozen=True)
class EventRole:
    """One of our events as the aggregator sees it."""

    event: str  # the name the kernel prints
    label: str  # what the ``probe`` key shows (the function)
    role: str = "hit"  # hit, entry, return
    view_filter: Callable[[Event], bool] | None = None  # what of the filter the kernel could not apply


def thread_key(pid: int) -> bytes:
    """A thread as the fast path keys it: the header's pid column, ``%-7d``."""
    return b"%-7d" % pid


def latency_in_unit(entered: float, returned: float, unit: str) -> int:
    """One call's latency from its entry's and its return's stamps (seconds, to the microsecond as the text
    prints them), as ``_readings`` and ``_latencies`` compute a batch: ms is a difference of ms clock readings
    (the kernel's common_timestamp/1000000 - $ts), us the rounded difference, ns the microseconds times 1000."""
    if unit == "ms":
        return round(returned * 1e6) // 1000 - round(entered * 1e6) // 1000
    micros = round((returned - entered) * 1e6)
    return micros * 1000 if unit == "ns" else micros


def _fixed_header(lines: list[bytes]) -> bool:
    """Whether the header is ``%16s-%-7d `` (kernels before 5.x printed ``%-5d``: no slices then)."""
    return lines[0][16:17] == b"-" and lines[0][24:25] == b" "


def _number(raw: bytes) -> int:
    return int(raw, 16) if b"x" in raw else int(raw)


def _numbers(raw: list[bytes]) -> list[int]:
    """Printed integers -> values, in one ``map(int)`` when the argument is printed in decimal."""
    try:
        return list(map(int, raw))
    except ValueError:  # hex (x8..x64)
        return list(map(_number, raw))


def _as_is(values: list[int]) -> list[int]:
    return values


def _group(keys: list, values: list) -> dict:
    """Values by their key (most blocks have a few keys, often one). A loop per line: picking each
    key's values out in C (``compress``) measured 1.7-4x slower from 2 keys up, ``map(operator.call)``
    into each key's ``append`` 1.3-1.8x slower."""
    distinct = set(keys)
    if len(distinct) == 1:
        return {distinct.pop(): values}
    groups: defaultdict = defaultdict(list)
    for key, value in zip(keys, values):
        groups[key].append(value)
    return groups


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
        self.keys = [key.name for key in aggregation.keys]
        columns = list(self.keys)
        if aggregation.kind == "hist":
            columns.append(aggregation.histogram_value.name)
        self.columns = columns
        self._patterns = {name: re.compile(re.escape(arguments[name].encode()) + b"=" + _NUMBER)
                          for name in columns if name in arguments and name != "comm"}
        self._comm_marker = b""
        self._value_and_comm: re.Pattern[bytes] | None = None  # a histogram by the captured comm alone: both columns in one regex pass
        if "comm" in arguments:  # the probe's own $comm, captured last: the rest of the line
            self._comm_marker = arguments["comm"].encode() + b'="'
            self._patterns["comm"] = re.compile(re.escape(self._comm_marker) + b'(.*)"\n')
            value = aggregation.histogram_value if aggregation.kind == "hist" else None
            if value is not None and self.keys == ["comm"] and value.name in arguments:
                self._value_name = arguments[value.name].encode() + b"="
                # The arguments between them a word at a time: "[^\n]*" to the line's end and back to the
                # comm's name cost 1.2x as much (measured).
                self._value_and_comm = re.compile(re.escape(self._value_name) + _NUMBER + b" (?:[^ \n]* )*?"
                                                  + re.escape(self._comm_marker) + b'(.*)"\n')
        self._one_event = len(roles) == 1
        # Latency: the text right after a line's timestamp tells entry from return.
        self._marker_length = max((len(role.event) for role in roles), default=0) + 2
        self._markers: dict[bytes, bool] = {}  # that text -> is the entry
        self._parser = LineParser()
        self._lock = threading.Lock()
        self._fast_rows: Counter = Counter()  # count: rows of bytes (slices, matched text)
        self._fast_cells: dict = {}  # hist, latency: the key's bytes -> Cell of bucketed values
        self._rows: Counter = Counter()  # rows of values from Events
        self._unmatched = 0
        self._entries: dict[bytes, float | int] = {}  # thread_key -> its entry's reading; across takes and paths
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
        # A lost-events line is a block's general path; the one-pass histogram by comm needs no search
        # for it (5-7% of its cost, measured): such a line has neither of the names it counts.
        if self.fast and (self._value_and_comm is not None or b"[LOST " not in data):
            lines = data.split(b"\n")  # cheaper than data.count(b"\n"), a byte-at-a-time loop in CPython
            lines.pop()  # after the last newline: nothing
            if not lines or (self._fast_latency(data, lines) if self.latency else
                             self._fast_count(data, lines) if self.aggregation.kind == "count" else
                             self._fast_hist(data, lines)):
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
            if role.role == "entry":  # keyed at its return: an entry captures no key
                [self._entries[thread_key(event.pid)]] = self._readings([event.ts])
                continue
            key = self._event_key(event, role)
            if key is None:
                continue
            if not self.latency:
                rows[key] += 1
                continue
            [now] = self._readings([event.ts])
            started = self._entries.pop(thread_key(event.pid), None)
            if started is None:
                unmatched += 1
            else:
                [latency] = self._latencies([now - started])
                rows[key + (latency,)] += 1
        with self._lock:
            self._rows.update(rows)
            self._unmatched += unmatched

    def _event_key(self, event: Event, role: EventRole) -> tuple | None:
        key: list[object] = []
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

    def _readings(self, stamps: list[float]) -> list:
        """Timestamps (seconds) as the unit's clock reads them: ms is the difference of ms clock readings,
        as the kernel's common_timestamp/1000000 - $ts; us and ns are differences of the stamps."""
        if self._divisor == 1:
            return stamps
        return list(map(floordiv, map(round, map(mul, stamps, repeat(1e6))), repeat(self._divisor)))

    def _latencies(self, differences: list) -> list[int]:
        """Differences of readings -> latencies in the unit. Two stamps are close, so their difference is
        exact in binary and rounding it gives the microseconds trace_pipe printed; ns is us times 1000."""
        if self._divisor != 1:
            return differences
        micros = map(round, map(mul, differences, repeat(1e6)))
        return list(map(mul, micros, repeat(self._scale)) if self._scale != 1 else micros)

    # -- the fast path ---------------------------------------------------------------------------

    def _column(self, name: str, data: bytes | None, lines: list[bytes]):
        """One column of the block, a value per line, maybe an iterator (None when the block does not fit).
        ``data``: the lines as one text (None: joined here if a regex needs it)."""
        if name in ("comm", "pid") and name not in self._patterns:  # from the header: slices of each line
            return map(_COMM if name == "comm" else _PID, lines) if _fixed_header(lines) else None
        if name == "comm":
            found = self._comms_in_place(lines)
            if found is not None:
                return found
        if data is None:
            data = b"\n".join(lines) + b"\n"
        if name == "probe":
            found = [next(iter(self.roles)).encode()] * len(lines) if self._one_event else _EVENT.findall(data)
        else:
            found = self._patterns[name].findall(data)
        return found if len(found) == len(lines) else None

    def _comms_in_place(self, lines: list[bytes]) -> list[bytes] | None:
        """Each line's captured comm when every line prints the same text from its timestamp's end to the
        comm (one probe site, no argument of varying width before it): a slice a line, where the regex
        reads every byte (latency by comm 1.1x, measured). That text holds no ``kptui_comm="`` but the
        argument's, so what is read is the captured comm (a copy in the header, which the regex would
        start at, is passed over). None: the lines differ there."""
        marker = self._comm_marker
        first = lines[0]
        colon = first.find(b": ", 24)  # after the header's "%16s-%-7d" and the timestamp
        at = first.find(marker, colon)
        if colon < 0 or at < 0:
            return None
        start = at + len(marker)
        same = first[colon:start]
        if lines[-1][colon:start] != same:  # most blocks that do not fit fail here, for nothing
            return None
        try:
            if (bytes(map(itemgetter(-1), lines)) != b'"' * len(lines)
                    or set(map(itemgetter(slice(colon, start)), lines)) != {same}):
                return None
        except IndexError:  # an empty line
            return None
        return list(map(itemgetter(slice(start, -1)), lines))

    def _misread_comm(self, keyed: Iterable, names: list[str]) -> bool:
        """Whether a captured comm in the keys of ``keyed`` may be misread. It is read from the first
        ``kptui_comm="`` of its line to the line's last quote: when that first one is not the argument's
        (a header's comm or a string argument that contains it), what is read contains the argument's.
        A comm read containing the name (rightly, when the comm itself does): the general path. Checked
        once per distinct key; counting the name in the block cost count by comm 1.1x (measured)."""
        if not self._comm_marker or "comm" not in names:
            return False
        marker = self._comm_marker
        if len(names) == 1:
            return any(marker in comm for comm in keyed)
        index = names.index("comm")
        return any(marker in row[index] for row in keyed)

    def _key_column(self, names: list[str], data: bytes | None, lines: list[bytes]):
        """The key of each line: the column's bytes, or a tuple of them for several keys; maybe an iterator
        (a list of slices costs count by comm 1.1x its rate, measured)."""
        columns = []
        for name in names:
            column = self._column(name, data, lines)
            if column is None:
                return None
            columns.append(column)
        return columns[0] if len(columns) == 1 else zip(*columns)

    def _fast_count(self, data: bytes, lines: list[bytes]) -> bool:
        if not self._one_event and "probe" not in self.columns:
            names = _EVENT.findall(data)
            if len(names) != len(lines) or any(name.decode() not in self.roles for name in set(names)):
                return False
        if not self.columns:
            rows = {(): len(lines)}
        else:
            keys = self._key_column(self.columns, data, lines)
            if keys is None:
                return False
            rows = Counter(keys)
            if self._misread_comm(rows, self.columns):
                return False
        with self._lock:
            self._fast_rows.update(rows)
        return True

    def _fast_hist(self, data: bytes, lines: list[bytes]) -> bool:
        if self._value_and_comm is not None:
            return self._fast_hist_by_comm(data, lines)
        values = self._column(self.columns[-1], data, lines)
        if values is None:
            return False
        if not self.keys:
            self._add_values({(): values}, _numbers)
            return True
        keys = self._key_column(self.keys, data, lines)
        if keys is None:
            return False
        groups = _group(list(keys), values)
        if self._misread_comm(groups, self.keys):
            return False
        self._add_values(groups, _numbers)
        return True

    def _fast_hist_by_comm(self, data: bytes, lines: list[bytes]) -> bool:
        """The value and the captured comm of each line in one regex pass (the regex engine reads a byte at
        a time: two passes cost 1.3x as much, measured): a match ends its line, so as many matches as lines is one a line; the value's name
        must be there once a line (another argument ending in the name, a comm containing it: the general
        path), so the one match read the value and (``_misread_comm``) the comm the general path reads."""
        assert self._value_and_comm is not None  # chosen only when the pattern was made
        found = self._value_and_comm.findall(data)
        count = len(lines)
        if len(found) != count or data.count(self._value_name) != count:
            return False
        groups: defaultdict = defaultdict(list)
        for value, comm in found:  # grouped as read: no separate key and value columns
            groups[comm].append(value)
        if self._misread_comm(groups, self.keys):
            return False
        self._add_values(groups, _numbers)
        return True

    def _fast_latency(self, data: bytes, lines: list[bytes]) -> bool:
        stamp = _STAMP.search(lines[0])
        if stamp is None or not _fixed_header(lines):
            return False
        start, colon = stamp.span(1)
        try:
            if bytes(map(itemgetter(colon), lines)) != b":" * len(lines):  # every stamp where the first line's is
                return False
        except IndexError:  # a line too short to have it
            return False
        marker = itemgetter(slice(colon + 2, colon + 2 + self._marker_length))
        roles = list(map(self._markers.get, map(marker, lines)))  # is the entry (True), the return (False)
        if None in roles:
            if not all(map(self._learn_marker, set(map(marker, lines)).difference(self._markers))):
                return False
            roles = list(map(self._markers.get, map(marker, lines)))
        try:
            stamps = list(map(float, map(itemgetter(slice(start, colon)), lines)))
        except ValueError:
            return False
        keys = None
        if self.keys:  # comm or pid, at the return: read on the returns' lines only (half the text)
            returns = list(compress(lines, map(not_, roles)))
            found = self._key_column(self.keys, None, returns) if returns else []
            if found is None:
                return False
            keys = list(found)
            # Paired as they are read, so checked before.
            if self._misread_comm(set(keys), self.keys):
                return False
        entries = self._entries
        forget = entries.pop
        unmatched = 0
        threads = map(_PID, lines)
        readings = self._readings(stamps)
        # The loop every line costs (the rest is in C): a KeyError costs only when raised (3.11). Pairing
        # with maps and compress in C instead measured 2.5x slower (a list per step).
        if keys is not None:  # grouped by key as paired: no second loop over the returns to group them
            timed: defaultdict = defaultdict(list)
            next_key = iter(keys).__next__  # a key per return
            for thread, is_entry, now in zip(threads, roles, readings):
                if is_entry:
                    entries[thread] = now
                else:
                    key = next_key()
                    try:
                        started = forget(thread)
                    except KeyError:
                        unmatched += 1
                    else:
                        timed[key].append(now - started)
            groups = {key: self._latencies(found) for key, found in timed.items()}
        else:
            differences: list = []
            keep = differences.append
            for thread, is_entry, now in zip(threads, roles, readings):
                if is_entry:
                    entries[thread] = now
                else:
                    try:
                        keep(now - forget(thread))
                    except KeyError:
                        unmatched += 1
            groups = {(): self._latencies(differences)} if differences else {}
        self._add_values(groups, _as_is, unmatched)
        return True

    def _learn_marker(self, marker: bytes) -> bool:
        """Whether the text after a timestamp is our entry or our return (remembered); False: neither."""
        if len(self._markers) >= _MAX_MARKERS:
            return False
        for role in self.roles.values():
            if marker.startswith(role.event.encode() + b": "):
                self._markers[marker] = role.role == "entry"
                return True
        return False

    def _add_values(self, groups: dict, numbers: Callable[[list], list[int]], unmatched: int = 0) -> None:
        """Each key's values (as ``numbers`` makes them) bucketed, summed and bounded, into its cell."""
        buckets = self.aggregation.bucket_scheme
        done = []
        for key, values in groups.items():
            values = numbers(values)
            low, high = min(values), max(values)
            done.append((key, buckets.counts(values, low, high), sum(values), low, high))
        with self._lock:
            cells = self._fast_cells
            for key, counts, total, low, high in done:
                cell = cells.get(key)
                if cell is None:
                    cell = cells[key] = Cell()
                cell.add_bucketed(counts, total, low, high)
            self._unmatched += unmatched

    # -- output ----------------------------------------------------------------------------------

    def take(self) -> Tally:
        """What was aggregated since the previous take; text becomes values once per distinct key here."""
        with self._lock:
            rows, cells, general, unmatched = self._fast_rows, self._fast_cells, self._rows, self._unmatched
            self._fast_rows, self._fast_cells, self._rows, self._unmatched = Counter(), {}, Counter(), 0
        tally = Tally(unmatched=unmatched)
        key_of = self._key_converter()
        if self.aggregation.kind == "count":
            for row, hits in general.items():
                tally.count(row, hits)
            one = len(self.columns) == 1
            for row, hits in rows.items():
                key = key_of((row,) if one else row)
                if key is not None:
                    tally.count(key, hits)
            return tally
        values: dict[tuple, Counter] = {}
        for row, hits in general.items():
            found = values.get(row[:-1])
            if found is None:
                found = values[row[:-1]] = Counter()
            found[row[-1]] += hits
        for key, counted in values.items():
            tally.cell(key).add_values(counted)
        one = len(self.keys) == 1
        for raw, cell in cells.items():
            key = key_of((raw,) if one else raw)
            if key is not None:
                tally.cell(key).merge(cell)
        return tally

    def _key_converter(self) -> Callable[[tuple], tuple | None]:
        """Turns the key columns of a fast-path row (bytes) into the tuple of values the general path makes."""
        parts: list[Callable[[bytes], object]] = []
        for name in self.keys:
            if name == "comm":
                captured = "comm" in self._patterns  # else the header's, padded to 16
                parts.append((lambda raw: raw.decode("utf-8", "backslashreplace")) if captured else
                             (lambda raw: raw.decode("utf-8", "backslashreplace").strip()))
            elif name == "pid":
                parts.append(int)
            elif name == "probe":
                labels = {role.event.encode(): role.label for role in self.roles.values()}

                def probe_label(raw: bytes, labels: dict[bytes, str] = labels) -> str:
                    return labels.get(raw, raw.decode())

                parts.append(probe_label)
            else:
                parts.append(_number)

        def convert(raw: tuple) -> tuple | None:
            try:
                return tuple(part(text) for part, text in zip(parts, raw))
            except ValueError:
                return None

        return convert
