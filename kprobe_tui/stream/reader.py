"""The worker thread that drains our instance's ``trace_pipe`` into the store.

It reads whatever the kernel has (non-blocking, woken by poll), parses it, appends to the
store, and at most every ``interval`` seconds hands one ``StreamUpdate`` to ``on_update``
(new-event counts per event, lost and garbled counters, vanished events): a flood costs the
UI ~20 updates a second, not one message per event.

Why text ``trace_pipe`` and not per-CPU ``trace_pipe_raw``: with text the kernel formats every
fetch type and probe site for us and merges the CPUs in time order; a raw reader must redo all
of that from the ``format`` files (and, like the text, look the comm up in saved_cmdlines).
``benchmarks/bench_stream.py`` measures both on the same flood: a minimal Python decode of raw
pages beats this reader (1.5-4x across runs), so a raw reader is the way past what this one
sustains (~150-260k events/s here); uprobe floods stay far below that (each trap costs ~20 us).
"""

from __future__ import annotations

import os
import select
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from kprobe_tui.kernel.instance import Instance
from kprobe_tui.stream.comms import CommNames
from kprobe_tui.stream.parser import Event, LineParser
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


class StreamReader(threading.Thread):
    """``StreamReader(instance, store, on_update).start()``; ``stop()`` joins it."""

    def __init__(self, instance: Instance, store: EventStore | None, on_update: Callable[[StreamUpdate], None],
                 interval: float = 0.05, on_events: Callable[[list[Event]], None] | None = None,
                 on_data: Callable[[bytes], None] | None = None, source: EventSource | None = None) -> None:
        super().__init__(name="kprobe-tui trace_pipe reader", daemon=True)
        self.instance = instance
        self.store = store
        self.on_update = on_update
        self.on_events = on_events  # the tail command prints each batch as it comes
        # An aggregation takes whole lines unparsed (it reads only what its answer needs); then
        # nothing is parsed or stored here.
        self.on_data = on_data
        self.interval = interval
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
                    if new or vanished or self.lost != lost_before or now - last_update >= 1.0:
                        self.on_update(StreamUpdate(new, per_event, now - last_update, self.lost,
                                                    source.garbled, vanished))
                        per_event, new, last_update = Counter(), 0, now
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
        per_event.update(ev.event for ev in events)
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
