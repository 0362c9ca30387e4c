"""The student's reader and the page reader decode with one decoder: the same records, as perf samples and as pages.

The records are the ones this machine's kernel wrote for a uprobe and its uretprobe (tests/unit/test_rawformat.py),
given a pid no process has (its name then comes from saved_cmdlines, and from a PERF_RECORD_COMM for perf). Each
is written once as ``PERF_RECORD_SAMPLE`` raw data in a CPU's perf ring (include/uapi/linux/perf_event.h, read by
kernel/perfevent.parse_records as from the mmap'd ring) and once in a ``trace_pipe_raw`` page of a tracefs tree of
files (tests/unit/test_rawpage_walk.py); a lost-events record and a page header's missed count say the same loss.
The stamps are whole microseconds: the text (and so the page reader) prints microseconds, perf keeps nanoseconds.
"""

from __future__ import annotations

import struct
import time

from kprobe_tui.kernel import perfevent
from kprobe_tui.kernel.instance import Instance
from kprobe_tui.kernel.tracefs import Tracefs
from kprobe_tui.stream import perfreader
from kprobe_tui.stream.ksyms import KernelSymbols
from kprobe_tui.stream.parser import Event
from kprobe_tui.stream.perfreader import PerfSource
from kprobe_tui.stream.rawformat import compile_format
from kprobe_tui.stream.rawpages import MISSED_EVENTS, MISSED_STORED
from kprobe_tui.stream.reader import RawPagesSource
from tests.unit.test_rawformat import ALPHA, EMPTY, HIT_FORMAT, HITR_FORMAT, RETURN
from tests.unit.test_rawpage_walk import HEADER_PAGE, data, page

PID = 2**31 - 2  # no such process
COMM = "prog"
LOST = 17
START_NS = 2_712_843_561_000
# CPU -> its records, each (nanoseconds after START_NS, record): every field type of HIT_FORMAT, and a return
RECORDS = {0: [(0, ALPHA), (33_000, RETURN)], 1: [(70_000, EMPTY)]}


def with_pid(record: bytes) -> bytes:
    return record[:4] + struct.pack("<i", PID) + record[8:]


def perf_record(kind: int, body: bytes) -> bytes:
    body += b"\0" * (-len(body) % 8)  # the kernel keeps each record 8-byte aligned
    return perfevent.HEADER.pack(kind, 0, perfevent.HEADER.size + len(body)) + body


def perf_sample(time_ns: int, cpu: int, raw: bytes) -> bytes:
    raw += b"\0" * (-(len(raw) + 4) % 8)  # the raw size and its data padded to 8 bytes (perf_prepare_sample)
    return perf_record(perfevent.RECORD_SAMPLE, perfevent.SAMPLE.pack(PID, PID, time_ns, cpu, 0, len(raw)) + raw)


def perf_comm(time_ns: int, cpu: int) -> bytes:
    name = COMM.encode() + b"\0" * (8 - len(COMM) % 8)
    sample_id = perfevent.COMM_ID.pack(PID, PID, time_ns, cpu, 0)
    return perf_record(perfevent.RECORD_COMM, perfevent.COMM_IDS.pack(PID, PID) + name + sample_id)


class RingBytes:
    """A sampler whose CPUs' rings held these bytes: read as TracepointSampler reads the mmap'd rings; ``later``:
    what the rings hold at the next read."""

    def __init__(self, rings: list[bytes], later: list[bytes] | None = None) -> None:
        self.rings = rings
        self.later = later or []

    def poll_fds(self) -> list[int]:
        return []

    def own_pids(self) -> set[int]:
        return set()

    def read(self) -> perfevent.Batch:
        batch = perfevent.Batch([], 0, {})
        for ring in self.rings:
            per_cpu: list[perfevent.Sample] = []
            batch.lost += perfevent.parse_records(ring, per_cpu, batch)
            batch.samples.append(per_cpu)
        self.rings, self.later = self.later, []
        return batch

    def close(self) -> None:
        pass


def perf_events() -> tuple[list[Event], int]:
    rings = []
    for cpu, records in RECORDS.items():
        ring = perf_comm(START_NS - 1000, cpu) if cpu == 0 else b""
        ring += b"".join(perf_sample(START_NS + delta, cpu, with_pid(record)) for delta, record in records)
        rings.append(ring + (perf_record(perfevent.RECORD_LOST, perfevent.LOST.pack(0, LOST)) if cpu == 1 else b""))
    formats = {compile_format(text).id: text for text in (HIT_FORMAT, HITR_FORMAT)}
    source = PerfSource(RingBytes(rings), formats)
    source.open()
    events = list(source.read(0.0).events) + source.flush()  # flush: the samples still held for their names
    return events, source.lost()


def page_events(tmp_path) -> tuple[list[Event], int]:
    (tmp_path / "events").mkdir()
    (tmp_path / "events/header_page").write_text(HEADER_PAGE)
    (tmp_path / "saved_cmdlines").write_text(f"{PID} {COMM}\n")
    (tmp_path / "saved_tgids").write_text(f"{PID} {PID}\n")
    instance_dir = tmp_path / "instances/kptui_test"
    for cpu, records in RECORDS.items():
        (instance_dir / f"per_cpu/cpu{cpu}").mkdir(parents=True)
        first = records[0][0]
        starts = [first] + [delta for delta, _ in records]
        body = [data(delta - before, with_pid(record)) for before, (delta, record) in zip(starts, records)]
        missed = {"flags": MISSED_EVENTS | MISSED_STORED, "missed": LOST} if cpu == 1 else {}
        (instance_dir / f"per_cpu/cpu{cpu}/trace_pipe_raw").write_bytes(page(START_NS + first, *body, **missed))
    (instance_dir / "options").mkdir()
    for option, on in (("stacktrace", "0"), ("irq-info", "1"), ("record-tgid", "1")):
        (instance_dir / f"options/{option}").write_text(on + "\n")
    (instance_dir / "buffer_subbuf_size_kb").write_text("4\n")
    decoders = {decoder.id: decoder for decoder in map(compile_format, (HIT_FORMAT, HITR_FORMAT))}
    source = RawPagesSource(Instance(Tracefs(tmp_path), name="kptui_test"), decoders, KernelSymbols(str(tmp_path / "none")))
    source.open()
    events = list(source.read(0.0).events) + source.flush()
    source.close()
    return events, source.lost()


def test_perf_samples_and_trace_pipe_raw_pages_of_the_same_records_give_the_same_events(tmp_path):
    from_perf, lost_by_perf = perf_events()
    from_pages, lost_by_pages = page_events(tmp_path)
    assert [event.printed() for event in from_perf] == [event.printed() for event in from_pages]
    assert [event.args for event in from_perf] == [event.args for event in from_pages]  # typed, for filters and JSON
    assert [(event.ts, event.cpu, event.event) for event in from_pages] == [
        (2712.843561, 0, "hit"), (2712.843594, 0, "hitr"), (2712.843631, 1, "hit")]
    assert {(event.pid, event.tgid, event.comm, event.flags) for event in from_pages} == {(PID, PID, COMM, "DBZff")}
    assert lost_by_perf == lost_by_pages == LOST


def test_a_sample_read_before_the_exec_record_that_names_it_is_named_by_it(monkeypatch):
    """perf's pipe writes each CPU's ring in turn: CPU 1's sample can be read before CPU 0's exec record of an
    earlier time. The sample waits for it (HOLD_SECONDS) and takes its name; it is not given out before."""
    monkeypatch.setattr(perfreader, "HOLD_SECONDS", 0.05)
    formats = {compile_format(HIT_FORMAT).id: HIT_FORMAT}
    source = PerfSource(RingBytes([b"", perf_sample(START_NS, 1, with_pid(ALPHA))], later=[perf_comm(START_NS - 1000, 0)]),
                        formats)
    source.open()
    assert source.read(0.0).events == []  # held: its name may come in the next read
    time.sleep(0.06)
    [event] = source.read(0.0).events
    assert event.comm == COMM and source.flush() == []
