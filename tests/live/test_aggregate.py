"""count, hist and latency on this machine's uprobes: exact answers from a program with known behaviour.

This kernel has no hist triggers, so these run the BPF engine where it can say the question, else the
user-space engine (and ``uprobe_profile`` for plain counts per probe); tests/live/test_bpf_engine.py sets the
two side by side, tests/kernel/test_aggregate_guest.py runs the hist triggers on the same program.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kprobe_tui.kernel import lifetime
from kprobe_tui.kernel.events import Events
from kprobe_tui.kernel.tracefs import Tracefs
from tests.aggregate_cli import LEN_VALUES, PROJECT, Aggregation, assert_summary_agrees_with_buckets, buckets, build, counts, expected_len_buckets, run_workload

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    return build(tmp_path_factory.mktemp("aggregate") / "kpt_aggregate_live")


def leftovers(root: Path, name: str) -> list[str]:
    """What a run named ``name`` (kptui_<pid>) left: probes, synthetic events, its instance."""
    lines = [line for file in ("uprobe_events", "dynamic_events") for line in (root / file).read_text().splitlines()
             if f"{name}/" in line or f"{name}__" in line]
    return lines + [f"instance {n}" for n in os.listdir(root / "instances") if n == name or n.startswith(f"{name}__")]


@pytest.fixture
def clean(tracefs_root):
    """Checks that every run of the test left nothing in the kernel."""
    runs: list[Aggregation] = []
    yield runs
    for run in runs:
        if run.proc.poll() is None:
            run.proc.terminate()  # a failed test's run still removes what it made
            run.proc.wait(timeout=60)
        assert leftovers(tracefs_root, run.name) == [], run.args


def start(clean, *args: str) -> Aggregation:
    run = Aggregation(*args)
    clean.append(run)
    run.ready()
    return run


def test_counts_per_comm_captured_at_the_hit(program, clean):
    """The program renames itself half way: the probe's own $comm counts each half under its name."""
    run = start(clean, "count", "-x", str(program), "work", "--by", "comm")
    assert "kernel engine: a BPF program of ours" in run.engine_line
    run_workload(program, "values", "100")
    record = run.final()
    assert counts(record, "comm") == {"kpt-alpha": 50, "kpt beta-2": 50}
    assert record["engine"] == "kernel" and record["count"] == 100 and record["end"] > record["start"]


def test_counts_per_port_in_network_byte_order_and_a_filter_on_it(program, clean):
    run = start(clean, "count", "-x", str(program), "work", "--by", "ntohs(port)")
    other = start(clean, "count", "-x", str(program), "work", "--by", "pid", "--filter", "ntohs(port) == 53 && len >= 0")
    run_workload(program, "values", "100")
    assert counts(run.final(), "ntohs(port)") == {53: 50, 80: 50}
    [(pid, hits)] = counts(other.final(), "pid").items()
    assert hits == 40 and pid > 0  # even calls with len 0, 200, 400, 600 (-200 filtered out)


def test_histogram_log2_and_linear_exact(program, clean):
    log2 = start(clean, "hist", "-x", str(program), "work", "len")
    linear = start(clean, "hist", "-x", str(program), "work", "len", "--linear=-100,500,200")
    run_workload(program, "values", "100")
    record = log2.final()
    assert buckets(record) == expected_len_buckets()
    assert (record["count"], record["sum"], record["min"], record["max"]) == (100, sum(v * n for v, n in LEN_VALUES.items()), -200, 700)
    assert buckets(linear.final()) == {(None, -100): 10, (-100, 100): 20, (100, 300): 20, (300, 500): 20, (500, None): 30}


def test_latency_of_a_sleeping_function_lands_in_its_log2_bucket(program, clean):
    run = start(clean, "latency", "-x", str(program), "nap", "--unit", "us")
    run_workload(program, "sleep", "3", "40")
    record = run.final()
    assert record["count"] == 3 and buckets(record) == {(32768, 65536): 3}
    assert 40_000 <= record["min"] <= record["avg"] <= record["max"] < 65536 and record["unit"] == "us"


def test_latencies_of_zero_give_min_zero_and_a_summary_that_fits_the_buckets(program, clean):
    """work() returns at once: in milliseconds nearly every call is 0 and a few cross a tick (1)."""
    run = start(clean, "latency", "-x", str(program), "work", "--unit", "ms", "--by", "comm")
    run_workload(program, "flood", "3000")
    record = run.final()
    assert record["count"] == 3000 and record["min"] == 0 and buckets(record)[0, 1] > 0
    assert_summary_agrees_with_buckets(record)


def test_latency_of_a_recursion_times_the_innermost_call(program, clean):
    """rec(3) recurses three times; only the innermost call (2 ms) is timed, the outer returns are unmatched."""
    run = start(clean, "latency", "-x", str(program), "rec", "--unit", "ms", "--by", "comm")
    run_workload(program, "recurse", "4")
    record = run.final()
    assert record["count"] == 4 and record["unmatched"] == 12
    assert counts(record, "comm") == {program.name[:15]: 4}
    # 2 ms and a wake-up: at least [2, 4), and above it only by the wake-up's delay on a loaded machine
    assert record["min"] >= 2 and min(buckets(record)) == (2, 4) and sum(buckets(record).values()) == 4


def test_counts_per_probe_come_from_uprobe_profile(program, clean):
    run = start(clean, "count", "-x", str(program), "work", "n*")
    assert "kernel engine: uprobe_profile" in run.engine_line
    assert any("skipped 1 not probeable: nanosleep" in line for line in run.stderr_lines)
    run_workload(program, "values", "30")
    run_workload(program, "sleep", "2", "1")
    assert counts(run.final(), "probe") == {"work": 30, "nap": 2}


def test_intervals_print_one_table_each(program, clean):
    run = start(clean, "count", "-x", str(program), "work", "--by", "comm", "-i", "0.5", "--engine", "user")
    run_workload(program, "values", "10")
    time.sleep(1.2)  # two more intervals: empty ones are printed too
    records = run.finish()
    assert run.returncode == 0 and len(records) >= 2 and records[-1]["final"]
    assert sum(record["count"] for record in records) == 10
    assert all(a["end"] <= b["start"] + 1e-6 for a, b in zip(records, records[1:]))
    assert {record["engine"] for record in records} == {"user"}


def test_text_output_is_bpftrace_layout(program, clean):
    run = Aggregation("hist", "-x", str(program), "work", "len", json_output=False)
    clean.append(run)
    run.ready()
    run_workload(program, "values", "100")
    run.proc.send_signal(signal.SIGINT)
    out, _ = run.proc.communicate(timeout=60)
    assert run.proc.returncode == 0
    assert "@len:\n(..., 0)               20 |" in out
    assert "[256, 512)             30 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|" in out
    assert "count 100, avg 250.0, min -200, max 700, sum 25000" in out


def test_the_hist_engine_is_refused_with_the_reason(program):
    result = subprocess.run([sys.executable, "-m", "kprobe_tui", "count", "-x", str(program), "work", "--by", "comm",
                             "--engine", "hist", "-d", "1"], cwd=PROJECT, capture_output=True, text=True)
    assert result.returncode == 2 and "--engine hist: this kernel has no hist triggers" in result.stderr
    assert "use --engine user" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_signal_removes_everything(program, tracefs_root, signum, clean):
    run = start(clean, "latency", "-x", str(program), "nap")
    assert leftovers(tracefs_root, run.name)  # probes and instance while it runs
    run.finish(signum)
    assert run.returncode == -signum


@pytest.mark.parametrize("engine", ["user", "bpf"])
def test_sigkill_then_cleanup_removes_everything(program, tracefs_root, clean, engine):
    """The user-space engine leaves its instance and probes; the BPF engine its probes (its programs go with
    the process)."""
    run = start(clean, "count", "-x", str(program), "work", "--by", "comm", "--engine", engine)
    run.finish(signal.SIGKILL)
    assert leftovers(tracefs_root, run.name)
    result = subprocess.run([sys.executable, "-m", "kprobe_tui", "cleanup"], cwd=PROJECT, capture_output=True, text=True)
    assert result.returncode == 0 and f"removed {run.name}/work" in result.stdout, result.stdout + result.stderr
    assert (f"removed instance {run.name}__agg1" in result.stdout) == (engine == "user")


def test_tail_takes_network_byte_order_filters_down_to_the_kernel(program, tracefs_root):
    """tail --filter 'ntohs(port) == 53': the kernel gets port == 13568 and only those events come."""
    group = "kptaggtail"
    top = Tracefs(tracefs_root)
    from kprobe_tui.probes.symbols import ElfSymbols

    offset = ElfSymbols(program).function("work").file_offset
    top.write("uprobe_events", f"p:{group}/work {program}:0x{offset:x} len=%di:s64 port=%si:u16\n")
    try:
        child = subprocess.Popen([sys.executable, "-m", "kprobe_tui", "tail", f"{group}/work", "--json", "--filter",
                                  "ntohs(port) == 53", "--duration", "10"], cwd=PROJECT, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        enable = tracefs_root / f"instances/kptui_{child.pid}/events/{group}/work/enable"
        for _ in range(400):
            if enable.exists() and enable.read_text().strip() == "1":
                break
            assert child.poll() is None, child.stderr.read()
            subprocess.run(["sleep", "0.05"])
        else:
            child.kill()
            pytest.fail("tail never enabled its event")
        kernel_filter = (tracefs_root / f"instances/kptui_{child.pid}/events/{group}/work/filter").read_text()
        run_workload(program, "values", "20")
        out, err = child.communicate(timeout=60)
        assert "port == 13568" in kernel_filter and f"filter kernel: {group}/work" in err
        ports = [__import__("json").loads(line)["args"]["port"] for line in out.splitlines()]
        assert ports == [0x3500] * 10
    finally:
        if (tracefs_root / f"events/{group}/work").exists():
            top.write("uprobe_events", f"-:{group}/work\n")


def test_a_run_in_process_cleans_up_after_itself(program, tracefs_root):
    """AggregationRun, the object the TUI view will drive: start, samples, stop; nothing left."""
    from kprobe_tui.aggregate.model import Aggregation as Model
    from kprobe_tui.aggregate.model import Field
    from kprobe_tui.aggregate.run import AggregationRun
    from kprobe_tui.aggregate.targets import TargetBuilder
    from kprobe_tui.kernel.sources import locate

    kernel = locate()
    top = kernel.tracing()
    model = Model("count", keys=(Field("comm"),))
    targets = TargetBuilder(kernel, top.read("README"), lifetime.run_name(), binary=str(program)).counting(
        ["work"], model, "")
    run = AggregationRun(top, model, targets)
    assert run.start().method == "bpf"
    try:
        first = run.sample()
        run_workload(program, "values", "20")
        final = run.stop()
    finally:
        run.stop()
    assert first.total.count == 0 and final.total.count == 20 and run.rates and final.rate >= 0
    assert leftovers(tracefs_root, lifetime.run_name()) == []
    assert not [e for e in Events(top).list() if e.group == lifetime.run_name()]
    assert os.getpid()  # nothing of this process stays registered to undo at exit


def test_two_runs_in_one_process_never_record_each_others_readers(tracefs_root):
    """Two aggregations at once in one process, as the TUI runs them, each counting per thread a CPython
    function every trace_pipe reader calls on each poll (~20 a second): ``_Py_read`` (its os.read) and
    ``PyThread_acquire_lock_timed`` (its wait). The first one's filters were written before the second's
    reader existed: they must be rewritten, or the first counts the second's reader. Another python
    process doing both 50 times is counted by both (the probes work)."""
    from kprobe_tui.aggregate.model import Aggregation as Model
    from kprobe_tui.aggregate.model import Field
    from kprobe_tui.aggregate.run import AggregationRun
    from kprobe_tui.aggregate.targets import TargetBuilder
    from kprobe_tui.kernel.sources import locate

    python = os.path.realpath(sys.executable)  # the interpreter running us, our readers included
    kernel = locate()
    top = kernel.tracing()
    model = Model("count", keys=(Field("pid"),))

    def run(function: str) -> AggregationRun:
        targets = TargetBuilder(kernel, top.read("README"), lifetime.run_name(), binary=python).counting(
            [function], model, "")
        started = AggregationRun(top, model, targets, engine="user")
        assert started.start().engine == "user"
        return started

    runs = [run("_Py_read")]
    try:
        runs.append(run("PyThread_acquire_lock_timed"))
        readers = {started.engine.reader.native_id for started in runs}
        work = "import os, threading\nwoken = threading.Event()\nfor _ in range(50): os.read(os.open('/dev/zero', 0), 1); woken.wait(0.001)"
        child = subprocess.Popen([python, "-c", work])
        assert child.wait(timeout=60) == 0
        time.sleep(1.0)  # each reader polls its trace_pipe ~20 times meanwhile
        ours = readers | {int(tid) for tid in os.listdir("/proc/self/task")}
        finals = [started.stop() for started in reversed(runs)]
    finally:
        for started in runs:
            started.stop()
    for final in finals:
        threads = {entry.key[0]: entry.count for entry in final.total.entries}
        assert threads.get(child.pid, 0) >= 50
        assert not ours & set(threads), {tid: threads[tid] for tid in ours & set(threads)}
    assert leftovers(tracefs_root, lifetime.run_name()) == []
