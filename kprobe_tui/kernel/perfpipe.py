"""Trace events read through a ``perf`` binary that may open them when we may not (set-up 2 of perf-security.rst).

An administrator may leave ``kernel.perf_event_paranoid`` at the distribution's default and give a
``perf_users`` group a ``perf`` carrying capabilities (cap_perfmon, ...): then only that ``perf`` can
sample the events, so it is the reader. It runs as ``perf record -e GROUP:EVENT ... -a -o -`` (found
on PATH, or named by KPROBE_TUI_PERF), and its output, perf.data in pipe mode, is decoded here into
the same ``Batch`` of raw samples as our own rings give (kernel/perfevent.py): the records
(tools/perf/Documentation/perf.data-file-format.txt) follow a 16-byte header; HEADER_ATTR records
give each event's sample layout by id, SAMPLE records carry the raw trace record, LOST and COMM are
read as from our rings, everything else (mmaps, features, ...) is skipped by its size. A filter or a
changed set of events restarts perf (events meanwhile are missed); stopping it is the whole clean-up.
"""

from __future__ import annotations

import errno
import os
import select
import shutil
import signal
import struct
import subprocess
import tempfile
import threading
import time

from kprobe_tui.errors import UserError
from kprobe_tui.kernel.perfevent import COMM_IDS, HEADER, LOST, RECORD_COMM, RECORD_LOST, RECORD_LOST_SAMPLES, RECORD_SAMPLE, U64, Batch, Sample

PIPE_MAGIC = b"PERFILE2"
RECORD_HEADER_ATTR, RECORD_HEADER_TRACING_DATA, RECORD_AUXTRACE, RECORD_FINISHED_INIT = 64, 66, 71, 82
ATTR_PREFIX = struct.Struct("<IIQQQ")  # type, size, config, sample_period, sample_type
# The sample fields in the order the kernel writes them, with their size (perf_event.h, PERF_SAMPLE_*)
IP, TID, TIME, ADDR, READ, CALLCHAIN, ID, CPU, PERIOD, STREAM_ID, RAW = (1 << bit for bit in range(11))
IDENTIFIER = 1 << 16
_FIXED_BEFORE_RAW = ((IDENTIFIER, 8), (IP, 8), (TID, 8), (TIME, 8), (ADDR, 8), (ID, 8), (STREAM_ID, 8), (CPU, 8), (PERIOD, 8))
# The most unparsed output held (a record is at most 64 KiB; tracing data a few hundred KiB).
MAX_PENDING = 64 << 20
READ_SIZE = 1 << 20


def find_perf() -> str | None:
    """The perf binary to use: KPROBE_TUI_PERF, else ``perf`` on PATH when it carries file capabilities.

    A perf without them may open no more than we may ourselves (the same paranoid rules): trying it would
    cost a ``perf record`` start (2-3 s on a busy machine) for nothing."""
    named = os.environ.get("KPROBE_TUI_PERF")
    if named:
        return named
    found = shutil.which("perf")
    try:
        return found if found and os.getxattr(found, "security.capability") else None
    except OSError:  # no such attribute: a plain perf
        return None


class PipeDecoder:
    """perf.data in pipe mode, fed in pieces; ``feed(data)`` appends what it completes to a Batch."""

    def __init__(self) -> None:
        self._pending = b""
        self._started = False
        self._layouts: dict[int, int] = {}  # sample id -> sample_type
        self._only_layout: int | None = None  # without PERF_SAMPLE_IDENTIFIER: the one event's sample_type
        self._skip = 0  # bytes of data that follow a record outside its size (tracing data)
        self.initialized = False  # perf said FINISHED_INIT: its events are (about to be) enabled
        # perf 6.1's record --no-buffering writes a few samples twice under a flood (4 of 200k two programs made
        # here, byte for byte, perf script shows them twice too): a CPU's samples come in time order, so one
        # not later than the last of its CPU is such a repeat, dropped and counted.
        self._last_time: dict[int, int] = {}
        self.repeated = 0

    def feed(self, data: bytes, batch: Batch, per_cpu: dict[int, list[Sample]]) -> None:
        buffer = self._pending + data
        at = 0
        if not self._started:
            if len(buffer) < 16:
                self._pending = buffer
                return
            if buffer[:8] != PIPE_MAGIC:
                raise UserError(f"perf record's output does not start as perf.data in pipe mode ({buffer[:8]!r})",
                                "check the perf binary (KPROBE_TUI_PERF)")
            at, self._started = U64.unpack_from(buffer, 8)[0], True
        while True:
            if self._skip:
                taken = min(self._skip, len(buffer) - at)
                at, self._skip = at + taken, self._skip - taken
                if self._skip:
                    break
            if at + HEADER.size > len(buffer):
                break
            kind, _misc, size = HEADER.unpack_from(buffer, at)
            if size < HEADER.size:
                raise UserError(f"perf record wrote a record of {size} bytes at {at}", "check the perf binary (KPROBE_TUI_PERF)")
            if at + size > len(buffer):
                break
            self._record(kind, buffer, at, size, batch, per_cpu)
            at += size
        self._pending = buffer[at:]
        if len(self._pending) > MAX_PENDING:
            raise UserError(f"perf record's output holds a record past {MAX_PENDING >> 20} MiB", "check the perf binary (KPROBE_TUI_PERF)")

    def _record(self, kind: int, buffer: bytes, at: int, size: int, batch: Batch, per_cpu: dict[int, list[Sample]]) -> None:
        body = at + HEADER.size
        if kind == RECORD_SAMPLE:
            sample = self._sample(buffer, body, at + size)
            if sample is None:
                return
            if sample.time_ns <= self._last_time.get(sample.cpu, -1):
                self.repeated += 1
                return
            self._last_time[sample.cpu] = sample.time_ns
            per_cpu.setdefault(sample.cpu, []).append(sample)
        elif kind == RECORD_FINISHED_INIT:
            self.initialized = True
        elif kind == RECORD_HEADER_ATTR and size >= HEADER.size + ATTR_PREFIX.size:
            _type, attr_size, _config, _period, sample_type = ATTR_PREFIX.unpack_from(buffer, body)
            ids = buffer[body + attr_size:at + size]
            for offset in range(0, len(ids) - 7, 8):
                self._layouts[U64.unpack_from(ids, offset)[0]] = sample_type
            if sample_type & RAW:
                self._only_layout = sample_type
        elif kind in (RECORD_HEADER_TRACING_DATA, RECORD_AUXTRACE) and size >= HEADER.size + 4:
            length = struct.unpack_from("<I" if kind == RECORD_HEADER_TRACING_DATA else "<Q", buffer, body)[0]
            self._skip = (length + 7) & ~7  # the data follows the record, padded to 8 bytes
        elif kind == RECORD_LOST and size >= HEADER.size + LOST.size:
            batch.lost += LOST.unpack_from(buffer, body)[1]
        elif kind == RECORD_LOST_SAMPLES and size >= HEADER.size + 8:
            batch.lost += U64.unpack_from(buffer, body)[0]
        elif kind == RECORD_COMM and size > HEADER.size + COMM_IDS.size + 8:
            _pid, tid = COMM_IDS.unpack_from(buffer, body)
            batch.learn(tid, self._side_band_time(buffer, at + size), buffer[body + COMM_IDS.size:at + size])

    def _side_band_time(self, buffer: bytes, end: int) -> int:
        """The time in a side-band record's trailing sample_id (its event known by the IDENTIFIER that ends
        it); 0 when it has none. Its fields, last first: IDENTIFIER, CPU, STREAM_ID, ID, then TIME."""
        sample_type = self._layouts.get(U64.unpack_from(buffer, end - 8)[0])
        if sample_type is None or not sample_type & IDENTIFIER or not sample_type & TIME:
            return 0
        at = end - 8 - 8 * sum(1 for bit in (CPU, STREAM_ID, ID) if sample_type & bit) - 8
        return U64.unpack_from(buffer, at)[0]

    def _sample(self, buffer: bytes, at: int, end: int) -> Sample | None:
        """The sample's tid, time, cpu and raw record, by its event's layout (None: not a raw sample)."""
        sample_type = self._layouts.get(U64.unpack_from(buffer, at)[0]) if end - at >= 8 and self._layouts else None
        if sample_type is None or not sample_type & IDENTIFIER:
            sample_type = self._only_layout
        if sample_type is None or not sample_type & RAW or sample_type & READ:
            return None
        pid = tid = time_ns = cpu = 0
        for bit, width in _FIXED_BEFORE_RAW:
            if not sample_type & bit:
                continue
            if at + width > end:
                return None
            if bit == TID:
                pid, tid = struct.unpack_from("<II", buffer, at)
            elif bit == TIME:
                time_ns = U64.unpack_from(buffer, at)[0]
            elif bit == CPU:
                cpu = struct.unpack_from("<I", buffer, at)[0]
            at += width
        if sample_type & CALLCHAIN:
            if at + 8 > end:
                return None
            at += 8 + 8 * U64.unpack_from(buffer, at)[0]
        if at + 4 > end:
            return None
        raw_size = struct.unpack_from("<I", buffer, at)[0]
        return Sample(pid, tid, time_ns, cpu, buffer[at + 4:min(at + 4 + raw_size, end)])


class PerfRecordPipe:
    """``perf record -e ... -a -o -`` as a child; ``read()`` gives what it wrote since, as a Batch.

    Its output is read from one descriptor that stays the same across restarts (each perf's pipe is
    dup2'd onto it), so a reader polling it never polls a closed one. Starting waits for perf's first
    output (written once its events are open), so a refusal (an unknown event, a bad filter, no
    permission) is a UserError at once, in perf's own words."""

    def __init__(self, perf: str, events: dict[str, str], ready_timeout: float = 30.0) -> None:
        """``events``: "group/event" -> its filter ("" for none). perf starts at ``enable()``, as a
        TracepointSampler samples from its ``enable()``: events and filters set before it cost no restart."""
        self.perf = perf
        self.events = dict(events)
        self.ready_timeout = ready_timeout
        self.child: subprocess.Popen | None = None
        self.decoder = PipeDecoder()
        self.enabled = False
        # The descriptor the reader polls: each perf's output is dup2'd onto it; while none runs, a pipe
        # nobody writes (a closed one would wake the reader's poll at once, forever).
        self._idle_read, self._idle_write = os.pipe()
        self._fd = os.dup(self._idle_read)
        self._early = Batch([], 0, {})  # what perf wrote while it started, given at the next read
        self._early_cpus: dict[int, list[Sample]] = {}
        self._stderr = tempfile.TemporaryFile()  # what perf says, read when it ends
        self._lock = threading.Lock()  # the reader thread reads while a switch or filter restarts perf

    @property
    def ids(self) -> dict[str, str]:
        """The events followed (by name), as TracepointSampler.ids names them."""
        return self.events

    def _command(self) -> list[str]:
        # --no-buffering: each sample is written at once (else perf holds it until half its ring is full);
        # --synth=no: no records of every process's maps and names at start (400 KiB, seconds on a busy
        # machine, during which perf's events are not yet enabled); names come as for our own rings.
        command = [self.perf, "record", "--quiet", "--no-buffering", "--synth=no", "--no-buildid", "--no-buildid-cache",
                   "-a", "-o", "-"]
        for name, expression in self.events.items():
            command += ["-e", name.replace("/", ":", 1)]
            if expression:
                command += ["--filter", expression]
        return command

    def _start(self) -> None:
        """perf, returning once it says FINISHED_INIT (its events are enabled right after: a workload started
        before that is missed, 0.7 s here) or once ``ready_timeout`` passed (a perf older than 5.19 never says it)."""
        if not self.events:
            return
        try:
            # stderr to a file: a pipe nobody reads would stop perf once 64 KiB of warnings filled it
            self._stderr.seek(0)
            self._stderr.truncate()
            child = subprocess.Popen(self._command(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=self._stderr, start_new_session=True)
        except OSError as exc:
            raise UserError(f"cannot run {self.perf}: {exc.strerror}", "name a perf binary with KPROBE_TUI_PERF") from None
        assert child.stdout is not None
        os.dup2(child.stdout.fileno(), self._fd)
        child.stdout.close()
        os.set_blocking(self._fd, True)
        self.child, self.decoder = child, PipeDecoder()
        self._early, self._early_cpus = Batch([], 0, {}), {}
        deadline = time.monotonic() + self.ready_timeout
        while not self.decoder.initialized and (left := deadline - time.monotonic()) > 0:
            if not select.select([self._fd], [], [], left)[0]:
                break
            data = os.read(self._fd, READ_SIZE)
            if not data:
                self._end(child, "ended")
            self.decoder.feed(data, self._early, self._early_cpus)
        os.set_blocking(self._fd, False)
        self.enabled = True

    def _end(self, child: subprocess.Popen, what: str) -> None:
        self._stop(child)
        self._stderr.seek(0)
        said = self._stderr.read(1 << 16).decode("utf-8", "replace").strip()
        raise UserError(f"{self.perf} record {what} (status {child.returncode}): {' '.join(said.split())[-400:] or 'it said nothing'}",
                        "check that this perf may record the events: perf record -e GROUP:EVENT -a")

    def poll_fds(self) -> list[int]:
        return [self._fd] if self._fd >= 0 else []

    def own_pids(self) -> set[int]:
        """perf itself: its own reads must not come back as events (the golden rule)."""
        child = self.child
        return {child.pid} if child is not None else set()

    def read(self) -> Batch:
        """What perf wrote since the last read (a UserError with perf's own words when it ended)."""
        with self._lock:
            batch, per_cpu = self._early, self._early_cpus
            self._early, self._early_cpus = Batch([], 0, {}), {}
            child = self.child
            while child is not None:
                try:
                    data = os.read(self._fd, READ_SIZE)
                except BlockingIOError:
                    break
                if not data:
                    self._end(child, "ended")
                self.decoder.feed(data, batch, per_cpu)
            batch.samples = [per_cpu[cpu] for cpu in sorted(per_cpu)]
        return batch

    def add(self, name: str, ident: int) -> None:
        """Follow one more event (perf again, with it)."""
        if name not in self.events:
            self._restart({**self.events, name: ""})

    def remove(self, name: str) -> None:
        if name in self.events:
            self._restart({key: value for key, value in self.events.items() if key != name})

    def set_filter(self, name: str, expression: str) -> None:
        """perf again with this filter on ``name`` (OSError EINVAL, and perf as before, when perf refuses it)."""
        if self.events.get(name, "") == expression:
            return
        before = dict(self.events)
        try:
            self._restart({**self.events, name: expression})
        except UserError as exc:
            self._restart(before)
            raise OSError(errno.EINVAL, exc.message) from None

    def enable(self) -> None:
        """Record again (pausing stops perf: nothing is sampled meanwhile)."""
        with self._lock:
            if self.child is None:
                self._start()

    def disable(self) -> None:
        with self._lock:
            self._stop(self.child)
            self.enabled = False

    def _restart(self, events: dict[str, str]) -> None:
        """perf takes its events and filters once, on its command line: events meanwhile are missed."""
        with self._lock:
            running = self.child is not None
            self._stop(self.child)
            self.events = events
            if running:
                self._start()

    def _stop(self, child: subprocess.Popen | None) -> None:
        """Ends ``child`` (if it runs) and puts the idle pipe back under the polled descriptor."""
        self.child = None
        if self._fd >= 0:
            os.dup2(self._idle_read, self._fd)
        if child is None or child.poll() is not None:
            return
        os.killpg(child.pid, signal.SIGTERM)  # its own session: perf's helpers go too
        try:
            child.wait(2)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()

    def close(self) -> None:
        with self._lock:
            self._stop(self.child)
            self._stderr.close()
            if self._fd >= 0:
                for fd in (self._fd, self._idle_read, self._idle_write):
                    os.close(fd)
                self._fd = -1


def perf_refusal(perf: str, event: str) -> str | None:
    """Why ``perf`` cannot record ``event`` (group/event) system-wide (None: it can): one short recording."""
    command = [perf, "record", "--quiet", "--synth=no", "--no-buildid", "--no-buildid-cache", "-a", "-e",
               event.replace("/", ":", 1), "-o", "/dev/null", "--", "true"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{perf} could not be run: {exc}"
    if done.returncode == 0:
        return None
    said = " ".join(done.stderr.split())
    return f"{perf} record -a -e {event.replace('/', ':', 1)} failed: {said[:300] or f'status {done.returncode}'}"
