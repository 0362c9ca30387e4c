"""The student's reader: trace events sampled through perf_event_open, as ``StreamReader`` events.

A user who cannot make a trace instance may still be let sample the administrator's events the way
``perf record -e GROUP:EVENT -a`` does (kernel/perfevent.py). ``PerfSource`` is the ``EventSource``
a ``StreamReader`` drains for them: each CPU's raw samples decoded by the event's own ``format``
file (stream/rawformat.py, the very ``Event`` the text reader makes of ``trace_pipe``), the CPUs
merged in time order, the lost samples counted from PERF_RECORD_LOST. Samples carry no name: a
process's is known from the PERF_RECORD_COMM of its exec (as perf script knows it); any other is
left ``<...>`` for the reader's ``CommNames`` (``/proc/<pid>/comm``), as the text reader leaves it.
A sample waits ``HOLD_SECONDS`` for the name records read after it (a bounded look-ahead, as the
binary pages have): a perf binary writes each CPU's ring in turn, so a sample read from one CPU can
come before the exec record, read from another, that names its process.
The samples of this process and of the sampler's own (a perf binary) are dropped (the golden rule:
the reader's own reads never feed it).
"""

from __future__ import annotations

import errno
import os
import time
from collections import deque
from operator import attrgetter
from typing import Protocol

from kprobe_tui.errors import UserError
from kprobe_tui.kernel.perfevent import Batch
from kprobe_tui.stream.comms import REMEMBERED, UNKNOWN_COMM
from kprobe_tui.stream.parser import Event
from kprobe_tui.stream.rawformat import EventDecoder, RecordError, compile_format
from kprobe_tui.stream.reader import SourceBatch

_TIME = attrgetter("ts")
# What a sample waits for the name records read after it: longer than one pass of perf over the rings (perf's
# --no-buffering pipe; CI once named a 'tvg' sample 'perf-exec', the name before its exec, and on a loaded run
# 0.2 s let every sample of a short program go out unnamed, so a filter on its comm kept none), chosen, not
# measured to the edge. The cost: a student's tail shows each event this much later.
HOLD_SECONDS = 0.5


class Sampler(Protocol):
    """What samples the events: our own rings (perfevent.TracepointSampler) or a perf binary (perfpipe.PerfRecordPipe)."""

    def poll_fds(self) -> list[int]:
        ...

    def own_pids(self) -> set[int]:
        ...

    def read(self) -> Batch:
        ...

    def close(self) -> None:
        ...


class PerfSource:
    """The ``EventSource`` of a sampler: opened by the caller (where its UserError can be shown)."""

    path = "the perf_event_open ring buffers"

    def __init__(self, sampler: Sampler, formats: dict[int, str]) -> None:
        """``formats``: tracepoint id -> its ``format`` text (UserError for one the decoder cannot render)."""
        self.sampler = sampler
        self.decoders: dict[int, EventDecoder] = {}
        for ident, text in formats.items():
            self.add_format(ident, text)
        self.comms: dict[int, str] = {}  # tid -> name, from the exec records seen
        self._held: deque[tuple[float, list]] = deque()  # (when read, the samples of that read), oldest first
        self._garbled = 0
        self._lost = 0
        self._ours = os.getpid()

    def add_format(self, ident: int, text: str) -> None:
        """Decode one more event's records (before its samples come: add it before opening it)."""
        self.decoders[ident] = compile_format(text)

    @property
    def garbled(self) -> int:
        return self._garbled

    @property
    def held(self) -> int:
        """Samples read but not yet given out (waiting for their names)."""
        return sum(len(samples) for _, samples in self._held)

    def open(self) -> list[int]:
        return self.sampler.poll_fds()

    def read(self, deadline: float) -> SourceBatch:
        """Everything the rings hold (a ring holds at most its pages: no deadline is needed); a sampler that
        ended (a perf binary that stopped) ends the reader with its words, as a failed read does."""
        try:
            batch = self.sampler.read()
        except UserError as exc:
            raise OSError(errno.EIO, exc.message) from None
        self._lost += batch.lost
        if batch.comms:
            self.comms.update(batch.comms)
            if len(self.comms) > REMEMBERED:
                for tid in list(self.comms)[: len(self.comms) - REMEMBERED]:
                    del self.comms[tid]
        now = time.monotonic()
        samples = [sample for cpu_samples in batch.samples for sample in cpu_samples]
        if samples:
            self._held.append((now, samples))
        due: list = []
        while self._held and now - self._held[0][0] >= HOLD_SECONDS:
            due += self._held.popleft()[1]
        return SourceBatch(self._decode(due), b"")

    def _decode(self, samples: list) -> list[Event]:
        """The samples as events in time order (each CPU's come in order; the CPUs are merged here)."""
        events: list[Event] = []
        decoders, comms, ours = self.decoders, self.comms, self.sampler.own_pids() | {self._ours}
        for pid, tid, time_ns, cpu, raw in samples:
            if pid in ours:
                continue
            ts = time_ns / 1e9
            decoder = decoders.get(int.from_bytes(raw[:2], "little"))
            try:
                if decoder is None:
                    raise RecordError(f"a sample of tracepoint {int.from_bytes(raw[:2], 'little')}, which is not followed")
                events.append(decoder.decode(raw, ts, cpu, comms.get(tid, UNKNOWN_COMM), pid))
            except RecordError as exc:
                self._garbled += 1
                events.append(Event(ts, cpu, tid, pid, comms.get(tid, UNKNOWN_COMM), "", "", exc.message))
        events.sort(key=_TIME)
        return events

    def flush(self) -> list[Event]:
        """The samples still held, named by every record read."""
        held = [sample for _, samples in self._held for sample in samples]
        self._held.clear()
        return self._decode(held)

    def lost(self) -> int:
        return self._lost

    def close(self) -> None:
        self.sampler.close()
