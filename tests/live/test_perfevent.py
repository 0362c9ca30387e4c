"""perf_event_open on a real uprobe's tracepoint: every call's values, the ring's wrap and lost count,
the kernel filter, and the refusal a user gets under the default paranoid level (issue 23)."""

from __future__ import annotations

import os
import random
import struct
import subprocess
from pathlib import Path

import pytest
from test_lab_mode import as_user

from kprobe_tui.errors import UserError
from kprobe_tui.kernel.perfevent import RECORD_SAMPLE, Batch, TracepointSampler, paranoid, parse_records, probe_permission, read_event_id
from kprobe_tui.kernel.perfpipe import PerfRecordPipe, PipeDecoder
from kprobe_tui.kernel.tracefs import Tracefs
from kprobe_tui.probes.symbols import ElfSymbols
from kprobe_tui.stream.rawformat import compile_format
from tests.conftest import system_user

pytestmark = pytest.mark.live

SOURCE = Path(__file__).parent / "c" / "tail_values.c"
GROUP = f"kpperftest_{os.getpid()}"
PROBE = "n=%di:s64 s=+0(%si):string arr=+0(%dx):s32[4]"
PERF = "/usr/bin/perf"


@pytest.fixture
def probed(tracefs_root, tmp_path):
    """``GROUP/hit`` on the program's hit(); the event's directory; removed afterwards."""
    binary = tmp_path / "tail_values"
    subprocess.run(["gcc", "-O1", "-o", str(binary), str(SOURCE)], check=True)
    offset = ElfSymbols(binary).function("hit").file_offset
    top = Tracefs(tracefs_root)
    top.write("uprobe_events", f"p:{GROUP}/hit {binary}:0x{offset:x} {PROBE}\n")
    try:
        yield tracefs_root / f"events/{GROUP}/hit", binary
    finally:
        top.write("uprobe_events", f"-:{GROUP}/hit\n")


def decoded(batch: Batch, decoder) -> list[int]:
    """The n= of each sample, CPU after CPU."""
    return [int(decoder.decode(sample.raw, 0.0, sample.cpu, "", sample.pid).body.split(" n=")[1].split()[0])
            for per_cpu in batch.samples for sample in per_cpu]


def sampled_values(sampler: TracepointSampler, event_dir: Path, run) -> tuple[list[int], int, int]:
    """Runs ``run()`` (a Popen) while draining the rings; the n= of every sample in order, lost, reads."""
    decoder = compile_format((event_dir / "format").read_text())
    values, lost, reads = [], 0, 0
    child = run()
    flushed = False
    while True:
        done = flushed
        if not flushed and child.poll() is not None:
            # The kernel writes a LOST record before the next record that fits: once the ring is drained,
            # an exec on CPU 0 (its PERF_RECORD_COMM) makes it write the count of the flood's last lost samples.
            drained = sampler.read()
            lost += drained.lost
            values += decoded(drained, decoder)
            subprocess.run(["taskset", "-c", "0", "true"], check=True)
            flushed = True
        batch = sampler.read()
        reads += 1
        lost += batch.lost
        values += decoded(batch, decoder)
        if done:
            return values, lost, reads
        sampler.wait(0.001)


def test_every_call_is_sampled_with_its_values_and_comm(probed):
    event_dir, binary = probed
    decoder = compile_format((event_dir / "format").read_text())
    sampler = TracepointSampler({f"{GROUP}/hit": read_event_id(event_dir)})
    try:
        sampler.enable()
        printed = subprocess.run([str(binary), "6"], capture_output=True, text=True, check=True).stdout.splitlines()
        batch = sampler.read()
    finally:
        sampler.close()
    samples = [sample for per_cpu in batch.samples for sample in per_cpu]
    args = [decoder.decode(s.raw, s.time_ns / 1e9, s.cpu, "", s.pid).args for s in samples]
    assert [f"n={a['n']} s={a['s']} arr={','.join(map(str, a['arr']))}" for a in args] == printed
    assert batch.lost == 0 and {batch.comms[s.tid] for s in samples} == {"tail_values"}  # from its exec's record


def test_a_one_page_ring_wraps_and_counts_what_it_lost(probed):
    """4 KiB a CPU: each sample is ~100 bytes, so the records wrap the ring every ~40 samples; every
    sample read decodes, in order, and what is missing PERF_RECORD_LOST reports."""
    event_dir, binary = probed
    calls = 20_000
    sampler = TracepointSampler({f"{GROUP}/hit": read_event_id(event_dir)}, pages=1, cpus=[0])
    try:
        sampler.enable()
        values, lost, reads = sampled_values(sampler, event_dir,
                                             lambda: subprocess.Popen(["taskset", "-c", "0", str(binary), str(calls), "q"]))
    finally:
        sampler.close()
    assert values == sorted(values) and len(set(values)) == len(values)
    assert set(values) <= set(range(100, 100 + calls))
    # lost counts every record the ring had no room for: a few are the names of processes exec'd on CPU 0
    # meanwhile (PERF_RECORD_COMM; 4 of 3107 in one run: taskset's and the program's own)
    missing = calls - len(values)
    assert missing <= lost <= missing + 100, (len(values), lost, reads)
    assert len(values) > 4096 // 100  # more than one ring's worth was read: it wrapped


def test_the_kernel_filter_keeps_only_what_it_matches(probed):
    event_dir, binary = probed
    sampler = TracepointSampler({f"{GROUP}/hit": read_event_id(event_dir)})
    try:
        sampler.set_filter(f"{GROUP}/hit", "n > 102 && n != 104")
        with pytest.raises(OSError):
            sampler.set_filter(f"{GROUP}/hit", "nosuchfield == 1")
        sampler.set_filter(f"{GROUP}/hit", "n > 102 && n != 104")
        sampler.enable()
        values, lost, _ = sampled_values(sampler, event_dir, lambda: subprocess.Popen([str(binary), "8"], stdout=subprocess.DEVNULL))
        sampler.set_filter(f"{GROUP}/hit", "n == 101")  # the kernel takes one filter an event: it is reopened
        again, _, _ = sampled_values(sampler, event_dir, lambda: subprocess.Popen([str(binary), "8"], stdout=subprocess.DEVNULL))
    finally:
        sampler.close()
    assert values == [103, 105, 106, 107] and lost == 0 and again == [101]


def test_a_user_under_the_default_paranoid_level_is_told_the_set_ups(probed):
    event_dir, _ = probed
    level = paranoid()
    if level is None or level < 1:
        pytest.skip(f"kernel.perf_event_paranoid is {level} here: users may sample")
    with system_user("kpperfuser") as user:
        why = as_user(user, lambda: str(probe_permission(event_dir)), read_everything=True)
    assert f"kernel.perf_event_paranoid is {level}" in why and "needs -1 or CAP_PERFMON" in why
    assert "sudo sysctl kernel.perf_event_paranoid=-1" in why and "setcap cap_perfmon" in why


def test_cut_and_unknown_records_are_skipped_not_read_past():
    header = (9).to_bytes(4, "little") + (0).to_bytes(2, "little")
    assert parse_records(header + (400).to_bytes(2, "little") + bytes(40), [], Batch([], 0, {})) == 0  # size past the end
    lost = (2).to_bytes(4, "little") + (0).to_bytes(2, "little") + (24).to_bytes(2, "little") + bytes(8) + (7).to_bytes(8, "little")
    unknown = (99).to_bytes(4, "little") + (0).to_bytes(2, "little") + (16).to_bytes(2, "little") + bytes(8)
    assert parse_records(unknown + lost + lost, [], Batch([], 0, {})) == 14


def first_sample(data: bytes) -> tuple[int, int]:
    """Where perf.data in pipe mode has its first sample record, and its size (walked record by record)."""
    at = 16
    while True:
        kind, _, size = struct.unpack_from("<IHH", data, at)
        if kind == RECORD_SAMPLE:
            return at, size
        at += size + (struct.unpack_from("<I", data, at + 8)[0] if kind == 66 else 0)  # tracing data follows its record


def test_perf_records_pipe_output_decodes_to_every_call_once(probed):
    """perf record -o - of two programs' flood (root's perf: set-up 2's reader without the set-up), decoded in
    pieces of random sizes: each call once, the repeats perf 6.1 writes under a flood dropped and counted."""
    event_dir, binary = probed
    calls = 10_000
    recording = subprocess.Popen([PERF, "record", "--quiet", "--no-buffering", "--synth=no", "-a", "-o", "-", "-e",
                                  f"{GROUP}:hit", "--", "sh", "-c", f"{binary} {calls} q & {binary} {calls} q; wait"],
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    data, _ = recording.communicate(timeout=300)
    decoder, batch, per_cpu = PipeDecoder(), Batch([], 0, {}), {}
    chunks = random.Random(23)
    at = 0
    while at < len(data):
        size = chunks.randint(1, 100_000)
        decoder.feed(data[at:at + size], batch, per_cpu)
        at += size
    samples = [sample for cpu in per_cpu.values() for sample in cpu]
    values = sorted(int(compile_format((event_dir / "format").read_text()).decode(s.raw, 0.0, s.cpu, "", s.pid).body
                        .split(" n=")[1].split()[0]) for s in samples)
    assert values == sorted(list(range(100, 100 + calls)) * 2) and batch.lost == 0, (len(values), decoder.repeated)

    first, size = first_sample(data)
    repeated = data[:first + size] + data[first:first + size] + data[first + size:]
    again = PipeDecoder()
    again.feed(repeated, Batch([], 0, {}), per_cpu := {})
    assert sum(map(len, per_cpu.values())) == 2 * calls and again.repeated == decoder.repeated + 1


def test_a_perf_that_cannot_record_says_why_at_once(probed):
    pipe = PerfRecordPipe(PERF, {f"{GROUP}/nosuchevent": ""})
    try:
        with pytest.raises(UserError) as refused:
            pipe.enable()
    finally:
        pipe.close()
    assert f"{PERF} record ended" in refused.value.message and "nosuchevent" in refused.value.message
