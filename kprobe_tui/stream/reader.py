"""The worker thread that drains our instance's ring buffer into the store.

It reads whatever the kernel has (non-blocking, woken by poll) from an ``EventSource``, appends it
to the store, and at most every ``interval`` seconds hands one ``StreamUpdate`` to ``on_update``
(new-event counts per event, lost and garbled counters, vanished events): a flood costs the UI
~20 updates a second, not one message per event. The sources:

- ``RawPagesSource``, a tail's (``StreamReader(events=...)``, which ``TailSession`` passes): the
  per-CPU ``trace_pipe_raw`` pages (stream/rawpages.py), each record decoded by its event's compiled
  ``format`` (stream/rawformat.py) into the very Event the text gives, its body printed only when
  asked for; comm and tgid those the text prints when it is read (a living task's from /proc, an exited
  one's from saved_cmdlines/saved_tgids), columns as the instance's options say, lost events from the page
  headers, kernel stacks from their own records, kernel probes' sites named by kallsyms.
- ``TracePipeSource``, the text ``trace_pipe``: the fallback, said once in ``StreamUpdate.notice``
  (an event whose ``print fmt`` the decoder cannot print, such as ``__print_flags``; user stacks; a
  clock that does not count nanoseconds; ``KPROBE_TUI_READER=text``), and the aggregations' source:
  their bucketing in C takes whole text lines (~0.7 us an event), while an argument of a binary event
  is its body printed and parsed again (8.5 against 3.6 us of CPU an event for reading the text).
- stream/perfreader.py's, the student's: perf_event_open rings, decoded by the same decoder.

Measured with ``benchmarks/bench_stream.py`` (step 1: one 300k-event uprobe flood drained by each
way in turn, on this shared 2-CPU VM, so in events per CPU-second, kernel time included): ``cat
trace_pipe`` 389k, the raw-page ceiling 12.7M, the raw-decode ceiling (a minimal Python walk and unpack of
the pages) 757k, this reader on the text 195k, on the binary pages 904k: 1.20x the raw-decode ceiling, 4.6x
the text; the events screen's full-screen frames during the live flood (step 4) median 1.3 ms, p95 5.4 ms.
In the QEMU guests (``--kprobe --calls 100000``, a kprobe flood under TCG) the binary reader was 0.39x (6.1)
and 0.50x (6.12) the raw-decode ceiling while it walked and decoded one record at a time; with a flood's
runs split and made into events in C (``RawPages._walk_uniform``, ``RawPagesSource._decode``) it is 1.00-1.12x
(6.1) and 1.15-1.20x (6.12), and 2.5-3.9x the text reader.
"""

from __future__ import annotations

import os
import select
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import groupby, islice, repeat
from operator import add, floordiv, getitem, itemgetter, ne, truediv
from typing import NamedTuple, Protocol

from kprobe_tui.errors import UserError
from kprobe_tui.kernel.instance import Instance
from kprobe_tui.stream.comms import UNKNOWN_COMM, CommNames, proc_comm, proc_tgid, saved_comm
from kprobe_tui.stream.ksyms import KernelSymbols
from kprobe_tui.stream.parser import Event, LineParser
from kprobe_tui.stream.rawformat import HEADER, EventDecoder, RecordError, StackDecoder, compile_format
from kprobe_tui.stream.rawpages import PageLayout, RawPages
from kprobe_tui.stream.store import EventStore

READ_SIZE = 1 << 16


@dataclass
class StreamUpdate:
    """What changed since the previous update."""

    new: int  # events appended
    per_event: Counter  # event name -> events appended
    interval: float  # seconds this update covers
    lost: int  # events the kernel lost so far (never decreases)
    garbled: int  # lines kept raw so far
    vanished: list[str] = field(default_factory=list)  # tailed events deleted by someone else
    finished: bool = False  # the reader stopped
    error: str = ""
    notice: str = ""  # said once, in the first update: why the text is read rather than the binary pages


class SourceBatch(NamedTuple):
    """What one read of a source brought: events, or (for a consumer of text) whole lines unparsed."""

    events: list[Event]
    lines: bytes  # complete lines, only from a source made for ``on_data``


class EventSource(Protocol):
    """What a ``StreamReader`` drains: our instance's text ``trace_pipe`` or another of the kernel's buffers.

    The reader's thread calls ``open()`` (so a failure to open ends the reader with an error, as a failed
    read does), polls the descriptors it returns, calls ``read()`` when one is readable or the interval
    passed, ``lost()`` once an interval, ``flush()`` when stopping and ``close()`` last.
    """

    path: str  # what it reads, named when a read fails

    @property
    def garbled(self) -> int:
        """Records it could not parse so far (handed over as raw events)."""
        ...

    def open(self) -> list[int]:
        """Opens what it reads; returns the descriptors to poll for more."""
        ...

    def read(self, deadline: float) -> SourceBatch:
        """What the kernel holds now, read until it is drained or ``deadline`` (monotonic) passed."""
        ...

    def flush(self) -> list[Event]:
        """Events held back for what might follow them (none will: the reader is stopping)."""
        ...

    def lost(self) -> int:
        """Events the kernel lost so far (never decreases)."""
        ...

    def close(self) -> None:
        ...


class TracePipeSource:
    """The instance's text ``trace_pipe``: parsed into events, or whole lines for ``on_data``."""

    def __init__(self, instance: Instance, lines: bool = False) -> None:
        self.instance = instance
        self.path = str(instance.trace_pipe)
        self.lines = lines
        self.parser = LineParser()
        self._fd = -1
        self._partial = b""
        self._stats_seen: dict[int, int] = {}  # per CPU: the stats count read last time
        self._lost = 0

    @property
    def garbled(self) -> int:
        return self.parser.counts.garbled

    def open(self) -> list[int]:
        self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        return [self._fd]

    def read(self, deadline: float) -> SourceBatch:
        chunks, drained = [], False
        while time.monotonic() < deadline:
            try:
                chunk = os.read(self._fd, READ_SIZE)
            except BlockingIOError:
                drained = True
                break
            if not chunk:
                drained = True
                break
            chunks.append(chunk)
        events: list[Event] = []
        lines = b""
        if chunks:
            data = self._partial + b"".join(chunks)
            cut = data.rfind(b"\n") + 1
            self._partial = data[cut:]
            if self.lines:
                lines = data[:cut]
            else:
                events = self.parser.feed(data[:cut].decode("utf-8", "backslashreplace").split("\n"))
        if drained and not self.lines:
            events += self.parser.flush_if_quiet()
        return SourceBatch(events, lines)

    def flush(self) -> list[Event]:
        return self.parser.flush()  # the held-back event is as complete as it gets

    def lost(self) -> int:
        for cpu, count in self.instance.lost().items():
            seen = self._stats_seen.get(cpu, 0)
            # stats restart from 0 when a buffer is resized or reset: count what came since
            self._lost += count - seen if count >= seen else count
            self._stats_seen[cpu] = count
        return self._lost

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


_EVENT_NAME = itemgetter(Event._fields.index("event"))
_EVENT_CPU = itemgetter(Event._fields.index("cpu"))
# Options that make the kernel print other lines than ``comm-pid [cpu] flags time: event: body`` (print_trace_line).
TEXT_ONLY_OPTIONS = ("latency-format", "raw", "hex", "bin")
KNOWN_HEADERS = 4096  # record headers remembered (a flood of many processes' events is not remembered whole)
RUN_SPLIT = 4  # records of one header are made into events together when their runs average this many or more
_NS, _CPU, _RECORD = itemgetter(0), itemgetter(1), itemgetter(2)  # of a (ns, cpu, record) of stream/rawpages.py
_HEADER_BYTES = slice(0, HEADER.size)
# The clocks whose stamps are nanoseconds, which the text prints as seconds.microseconds (the others print counts).
NANOSECOND_CLOCKS = frozenset({"local", "global", "mono", "mono_raw", "boot", "tai", "perf"})


class RawPagesSource:
    """The instance's per-CPU ``trace_pipe_raw`` pages, each record decoded by its event's compiled format.

    Comm and tgid are what the text prints when it is read (``_name``), and the columns follow the instance's
    options as the text does (irq-info, record-tgid; re-read once a second). A record of an event enabled after
    the start is decoded once that event's format compiles; a record no
    format decodes is kept raw and counted as garbled, as the text reader keeps a line it cannot parse.
    """

    def __init__(self, instance: Instance, decoders: dict[int, EventDecoder], symbols: KernelSymbols) -> None:
        self.instance = instance
        self.symbols = symbols
        self.path = str(instance.tracefs.path("per_cpu"))
        self.decoders = decoders
        self.kept_raw = 0  # records no format decodes
        self.pages: RawPages | None = None
        self._tried = set(instance.enabled)  # events whose format was compiled or refused
        self._names: dict[int, tuple[str, int | None]] = {}  # pid -> its comm and tgid, as of these records
        self._tgids: dict[int, int] = {}  # saved_tgids as read last, empty unless the instance records tgids
        self._saved = b""  # saved_cmdlines as read after these records (each line after a newline), or b""
        self._recent: dict[int, tuple[str, int | None]] = {}  # names looked up in the last second (see _name)
        self._options_read = 0.0  # when the options and saved_tgids were read last (monotonic)
        self._flags_column = self._tgid_column = True  # the irq-info and record-tgid options
        # A record's common fields (type, flags, pid) -> its event's type, the fields they give (pid, tgid, comm,
        # flags column, event) and the fixed size of its records: the next record of that header costs only its
        # tuple (0.3 against 0.9 us of decode and look-ups). Forgotten each batch, whose names are looked up anew.
        self._known: dict[bytes, tuple[type[Event], tuple, int]] = {}
        # Kernel stacks (the stacktrace option, switched on at any time): each a record of its own after its
        # event's, which waits for it as the text reader's parser waits for the stack's lines.
        self._stacks = _option(instance, "stacktrace")
        self._stack: StackDecoder | None = None
        try:
            self._stack = StackDecoder(instance.top.read("events/ftrace/kernel_stack/format"), symbols,
                                       _option(instance, "sym-offset"))
        except UserError:
            pass  # a stack record is then kept raw, counted as garbled
        self._held: list[Event] = []  # each CPU's newest event and those after it, while its stack may still come

    @property
    def garbled(self) -> int:
        """Records kept raw, and pages whose records ran past their end (the rest of such a page is skipped)."""
        return self.kept_raw + (self.pages.broken if self.pages is not None else 0)

    def open(self) -> list[int]:
        self.pages = RawPages(self.instance)
        return self.pages.fds()

    def read(self, deadline: float) -> SourceBatch:
        """While stacks are recorded, each CPU's newest event waits for one more read, with the events after it
        (to keep their order): the kernel commits a stack just after its event, and a read between the two must
        not part them, whatever another CPU recorded meanwhile (tests/unit/test_rawpages_stacks.py)."""
        assert self.pages is not None, "read before open"
        if time.monotonic() - self._options_read > 1.0:
            self._read_options()
        events, self._held, brought = self._held, [], False
        waited = len(events)  # these waited one read: they go now
        while True:
            records = self.pages.read()
            if records:
                brought = True
                self._decode(records, events)
            if self.pages.drained or time.monotonic() >= deadline:
                break
        if self._stacks and brought:
            cut = max(waited, _newest_of_each_cpu(events, waited))
            events, self._held = events[:cut], events[cut:]
        return SourceBatch(events, b"")



    def _decode(self, records: list[tuple[int, int, bytes]], events: list[Event]) -> None:
        """Appends the events of ``records`` to ``events``; a stack goes to its event there.

        A flood's records come in runs of one header (one event of one process): those of a header already
        decoded are made into events in C, the others one by one (``_decode_each``). In the 6.1 guest, on one
        kprobe flood's records, an event cost 10.1 us this way against 13.6 us one by one."""
        self._names = {0: ("<idle>", self._tgids.get(0))}  # a pid's name changes (exec) and pids are reused
        self._known.clear()
        self._saved = b""
        headers: list[bytes] = list(map(getitem, map(_RECORD, records), repeat(_HEADER_BYTES)))
        runs = 1 + sum(map(ne, headers, islice(headers, 1, None)))
        if runs * RUN_SPLIT > len(records):  # short runs: their set-up would cost more than it saves
            self._decode_each(records, events)
            return
        known, at = self._known, 0
        for header, same in groupby(headers):
            length = len(list(same))
            run, at = records[at:at + length], at + length
            seen = known.get(header)
            if seen is None:  # its first record makes the event, and its header known
                self._decode_each(run[:1], events)
                run = run[1:]
                seen = known.get(header)
            if seen is None or not run or min(map(len, map(_RECORD, run))) < seen[2]:
                self._decode_each(run, events)
                continue
            event_type, (pid, tgid, comm, flags, name), _ = seen
            stamps = map(truediv, map(floordiv, map(add, map(_NS, run), repeat(500)), repeat(1000)), repeat(1_000_000))
            events.extend(map(tuple.__new__, repeat(event_type), zip(
                stamps, map(_CPU, run), repeat(pid), repeat(tgid), repeat(comm), repeat(flags), repeat(name),
                map(_RECORD, run), repeat(None))))

    def _decode_each(self, records: list[tuple[int, int, bytes]], events: list[Event]) -> None:
        """``_decode`` one record at a time: what a record's header names (decoder, comm) is looked up and kept."""
        decoders, names, known = self.decoders, self._names, self._known
        header = HEADER.unpack_from
        stack_id = self._stack.id if self._stack is not None else -1
        for ns, cpu, record in records:
            ts = (ns + 500) // 1000 / 1_000_000  # rawpages.seconds(ns), inline: the call costs 50 ns an event
            seen = known.get(record[:HEADER.size])
            if seen is not None and len(record) >= seen[2]:
                events.append(tuple.__new__(seen[0], (ts, cpu, *seen[1], record, None)))
                continue
            try:
                ident, flags, pid = header(record)
                if ident == stack_id:
                    self._attach_stack(events, cpu, record)
                    continue
                decoder = decoders.get(ident) or self._late_decoder(ident)
                named = names.get(pid)
                if named is None:
                    named = names[pid] = self._name(pid)
                if decoder is None:
                    raise RecordError(f"a record of event type {ident}, which no enabled event's format decodes")
                event = decoder.event(record, ts, cpu, pid, flags, *named)
                events.append(event)
                if len(known) < KNOWN_HEADERS:
                    known[record[:HEADER.size]] = (type(event), event[2:7], decoder.size)
            except RecordError as exc:
                events.append(self._garbled(ts, cpu, record, exc.message))
            except struct.error:
                events.append(self._garbled(ts, cpu, record, f"a record of {len(record)} bytes"))

    def _attach_stack(self, events: list[Event], cpu: int, record: bytes) -> None:
        """Gives the stack to its event, the newest of its CPU (a stack with no event before it is dropped, as
        the text reader's parser drops its lines)."""
        assert self._stack is not None, "a stack record without a stack decoder"
        self._stacks = True
        for at in range(len(events) - 1, -1, -1):
            event = events[at]
            if event.cpu == cpu:
                if event.event and event.stack is None:
                    events[at] = event._replace(stack=self._stack.frames(record))
                return

    def _garbled(self, ts: float, cpu: int, record: bytes, why: str) -> Event:
        """A record kept raw, as the text reader keeps a line it cannot parse."""
        self.kept_raw += 1
        return Event(ts, cpu, 0, None, "", "", "", f"{why}: {record[:64].hex()}")

    def _late_decoder(self, ident: int) -> EventDecoder | None:
        """The decoder of an event enabled after the start, compiled once."""
        for target in list(self.instance.enabled):
            if target not in self._tried:
                self._tried.add(target)
                try:
                    decoder = compile_event(self.instance, *target, self.symbols)
                except UserError:
                    continue  # its records are kept raw, counted as garbled
                decoder.show_flags(self._flags_column)
                self.decoders.setdefault(decoder.id, decoder)
        return self.decoders.get(ident)

    def _name(self, pid: int) -> tuple[str, int | None]:
        """A pid's comm and tgid as the text would print them now, looked up once a batch of records.

        The text prints the name saved_cmdlines holds when it is read; the kernel saves a task's name there when
        it is next switched out after an event, so a snapshot read before a record was written may hold the
        pid's previous owner's name, or its name before an exec (a once-a-second snapshot named 4 of 60 short
        runs after node threads that had had their pids). A living task's name is its own (/proc); an exited
        one's is the one it had when last looked up in this second, else saved_cmdlines', read after its records
        were. That read is kept rare: 3.5 ms for its 6552 names here, during which the kernel's saves of names
        fail (trace_save_cmdline's trylock), so a short-lived task exiting then keeps its pid's previous name.
        The tgid likewise: a living task's from /proc, else saved_tgids' (read once a second: 17 ms here)."""
        comm = proc_comm(pid)
        if comm is not None:
            named = self._recent[pid] = (comm, proc_tgid(pid) if self._tgid_column else None)
            return named
        if pid in self._recent:  # exited since: its last name (a drained burst spans many batches)
            return self._recent[pid]
        if not self._saved:
            try:
                self._saved = b"\n" + self.instance.top.path("saved_cmdlines").read_bytes()
            except OSError:
                self._saved = b"\n"
        named = self._recent[pid] = (saved_comm(self._saved, pid) or UNKNOWN_COMM, self._tgids.get(pid))
        return named

    def _read_options(self) -> None:
        """The options that shape the text's columns, which anyone may switch at any time (a new instance takes
        the top level's: after other tests the 6.1 guest's had irq-info off), and saved_tgids."""
        self._options_read = time.monotonic()
        self._recent.clear()
        self._flags_column, self._tgid_column = _option(self.instance, "irq-info"), _option(self.instance, "record-tgid")
        for decoder in self.decoders.values():
            decoder.show_flags(self._flags_column)
        self._tgids = {}
        if self._tgid_column:
            self._tgids = {pid: int(tgid) for pid, tgid in _saved_pairs(self.instance, "saved_tgids") if tgid.isdigit()}

    def flush(self) -> list[Event]:
        held, self._held = self._held, []
        return held

    def lost(self) -> int:
        return self.pages.missed if self.pages is not None else 0

    def close(self) -> None:
        if self.pages is not None:
            self.pages.close()


def _newest_of_each_cpu(events: list[Event], start: int) -> int:
    """Where the earliest of the newest events of the CPUs of ``events[start:]`` is."""
    cpus, seen, cut = len(set(map(_EVENT_CPU, events[start:]))), set(), len(events)
    for at in range(len(events) - 1, start - 1, -1):
        if events[at].event and events[at].cpu not in seen:
            seen.add(events[at].cpu)
            cut = at
            if len(seen) == cpus:
                break
    return cut


def _saved_pairs(instance: Instance, name: str) -> list[tuple[int, str]]:
    """The ``PID VALUE`` lines of saved_cmdlines or saved_tgids (unreadable: none)."""
    try:
        text = instance.top.read(name)
    except UserError:
        return []
    pairs = []
    for line in text.splitlines():
        pid, _, value = line.partition(" ")
        if pid.isdigit() and value:
            pairs.append((int(pid), value))
    return pairs


def choose_source(instance: Instance, events: list[tuple[str, str]]) -> tuple[EventSource, str]:
    """The binary pages when every event's format compiles and the instance prints nothing they lack, else the
    text, and why (said once to the user). ``KPROBE_TUI_READER=text`` asks for the text."""
    if os.environ.get("KPROBE_TUI_READER") == "text":
        return TracePipeSource(instance), ""

    def option(name: str) -> bool:
        return _option(instance, name)

    try:
        if option("userstacktrace"):
            return TracePipeSource(instance), "user stack traces are read from the text trace_pipe"
        bare = instance.tracefs.exists("options/context-info") and not option("context-info")
        reshaped = [f"{name} on" for name in TEXT_ONLY_OPTIONS if option(name)] + ["context-info off"] * bare
        if reshaped:
            return TracePipeSource(instance), f"option {reshaped[0]}: the text trace_pipe is read, as the kernel prints it"
        clock = instance.tracefs.read("trace_clock").partition("[")[2].partition("]")[0]
        if clock not in NANOSECOND_CLOCKS:
            return TracePipeSource(instance), f"trace_clock {clock} is printed by the text trace_pipe only"
        decoders = {}
        symbols = KernelSymbols()
        for group, event in events:
            try:
                decoder = compile_event(instance, group, event, symbols)
            except UserError as exc:
                return TracePipeSource(instance), f"event {group}/{event} is read from the text trace_pipe: {exc.message}"
            decoders[decoder.id] = decoder
        PageLayout(instance.top.read("events/header_page"))
    except UserError as exc:
        return TracePipeSource(instance), f"reading the text trace_pipe: {exc.message}"
    return RawPagesSource(instance, decoders, symbols), ""


def _option(instance: Instance, name: str) -> bool:
    return instance.tracefs.exists(f"options/{name}") and instance.tracefs.read(f"options/{name}").strip() == "1"


def compile_event(instance: Instance, group: str, event: str, symbols: KernelSymbols) -> EventDecoder:
    """The decoder of one event's records (UserError when it cannot have one): a kernel probe's site named by
    ``symbols``, as the text names it."""
    text = instance.event_format(group, event)
    probe = "__probe_ip;" in text or "__probe_func;" in text
    if probe and not any(known.event == event and known.is_uprobe for known in instance.events.events_in(group)):
        if _option(instance, "sym-addr"):
            raise UserError("option sym-addr prints each site's address too")
        symbols.check()
        return compile_format(text, symbols)
    return compile_format(text)


class StreamReader(threading.Thread):
    """``StreamReader(instance, store, on_update).start()``; ``stop()`` joins it."""

    def __init__(self, instance: Instance, store: EventStore | None, on_update: Callable[[StreamUpdate], None],
                 interval: float = 0.05, on_events: Callable[[list[Event]], None] | None = None,
                 on_data: Callable[[bytes], None] | None = None, source: EventSource | None = None,
                 events: list[tuple[str, str]] | None = None) -> None:
        """``events``: the events tailed, read from the binary pages when their formats allow (``choose_source``);
        without them, or for ``on_data``, the text is read. ``source``: what to read, chosen by the caller."""
        super().__init__(name="kprobe-tui trace_pipe reader", daemon=True)
        self.instance = instance
        self.store = store
        self.on_update = on_update
        self.on_events = on_events  # the tail command prints each batch as it comes
        # An aggregation takes whole lines unparsed (it reads only what its answer needs); then
        # nothing is parsed or stored here.
        self.on_data = on_data
        self.interval = interval
        self.notice = ""  # why the text is read although the binary pages were asked for
        if source is None and events is not None and on_data is None:
            source, self.notice = choose_source(instance, events)
        self.source: EventSource = source or TracePipeSource(instance, lines=on_data is not None)
        self.comms = CommNames(instance.top.path("saved_cmdlines").read_text)
        self._stopping = threading.Event()
        self.lost = 0
        self._vanished: set[str] = set()

    @property
    def garbled(self) -> int:
        """Records kept raw so far."""
        return self.source.garbled

    def stop(self, timeout: float = 2.0) -> None:
        """Ask the thread to end and wait a little: never forever, because this also runs from a
        signal handler, which may have interrupted a thread holding the store's lock the reader needs."""
        self._stopping.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout)

    def run(self) -> None:
        error = ""
        try:
            self._loop()
        except OSError as exc:
            error = f"reading {self.source.path} failed: {exc.strerror or exc}"
        self.on_update(StreamUpdate(0, Counter(), 0.0, self.lost, self.source.garbled, finished=True, error=error))

    def _loop(self) -> None:
        source = self.source
        try:
            poller = select.poll()
            for fd in source.open():
                poller.register(fd, select.POLLIN)
            per_event: Counter = Counter()
            new = 0
            last_update = last_check = time.monotonic()
            last_read = 0.0
            notice = self.notice
            while not self._stopping.is_set():
                poller.poll(self.interval * 1000)
                if self.on_data is not None:
                    # An aggregation needs no event at once: reading once per interval hands over blocks
                    # of a flood, not a few events per wake-up (trace_pipe wakes its reader at the first
                    # event, whatever buffer_percent says): user CPU per million uprobe hits went from
                    # 7.7 s to 0.7 s (benchmarks/bench_aggregate.py).
                    self._stopping.wait(max(0.0, last_read + self.interval - time.monotonic()))
                    last_read = time.monotonic()
                events, lines = source.read(time.monotonic() + self.interval)
                if lines and self.on_data is not None:
                    self.on_data(lines)
                    new += lines.count(b"\n")
                if events:
                    new += self._hand_over(events, per_event)
                now = time.monotonic()
                if now - last_update >= self.interval:
                    vanished: list[str] = []
                    if now - last_check >= 1.0:
                        vanished, last_check = self._check_vanished(), now
                    lost_before, self.lost = self.lost, source.lost()
                    # Quiet updates only once a second: then the first event after a pause goes up at once.
                    if new or vanished or self.lost != lost_before or now - last_update >= 1.0 or notice:
                        self.on_update(StreamUpdate(new, per_event, now - last_update, self.lost,
                                                    source.garbled, vanished, notice=notice))
                        per_event, new, last_update, notice = Counter(), 0, now, ""
            last = source.flush()
            if last:
                self._hand_over(last, Counter())
        finally:
            source.close()

    def _hand_over(self, events: list[Event], per_event: Counter) -> int:
        """Names, stores and passes on a batch; counts it per event. Returns how many."""
        events = self.comms.name(events)
        if self.store is not None:
            self.store.extend(events)
        per_event.update(map(_EVENT_NAME, events))  # in C: 43 against 68 ns an event with a generator
        if self.on_events:
            self.on_events(events)
        return len(events)

    def _check_vanished(self) -> list[str]:
        gone = []
        for group, event in self.instance.enabled:
            name = f"{group}/{event}"
            if name not in self._vanished and not self.instance.event_exists(group, event):
                self._vanished.add(name)
                gone.append(name)
        return gone
