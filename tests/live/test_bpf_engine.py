"""The BPF engine on this machine's uprobes: exact answers from a program with known behaviour, the same
as the user-space engine's on the same calls, our own threads never counted, a full map counted as dropped,
and the kernel's refusals said in its own words."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kprobe_tui.aggregate import bpf_engine
from kprobe_tui.errors import UserError
from kprobe_tui.kernel import bpf, lifetime
from tests.aggregate_cli import LEN_VALUES, PROJECT, Aggregation, assert_summary_agrees_with_buckets, buckets, build, counts, expected_len_buckets, run_workload

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    return build(tmp_path_factory.mktemp("bpf") / "kpt_aggregate_bpf")


def both(*args: str) -> dict[str, Aggregation]:
    """The same question to the BPF engine and to the user-space engine, both running before the calls."""
    runs = {engine: Aggregation(*args, "--engine", engine) for engine in ("bpf", "user")}
    for run in runs.values():
        run.ready()
    return runs


def finals(runs: dict[str, Aggregation]) -> dict[str, dict]:
    answers = {engine: run.final() for engine, run in runs.items()}
    assert "kernel engine: a BPF program of ours" in runs["bpf"].engine_line
    for answer in answers.values():
        answer.pop("engine"), answer.pop("start"), answer.pop("end")
    return answers


def test_counts_by_comm_and_pid_are_the_user_space_engines(program):
    runs = both("count", "-x", str(program), "work", "--by", "comm,pid")
    run_workload(program, "values", "100")
    answers = finals(runs)
    assert answers["bpf"] == answers["user"]
    assert {key["comm"]: n for key, n in ((e["key"], e["count"]) for e in answers["bpf"]["entries"])} == {
        "kpt-alpha": 50, "kpt beta-2": 50}


def test_a_histogram_of_a_signed_value_is_exact(program):
    runs = both("hist", "-x", str(program), "work", "len", "--by", "comm")
    run_workload(program, "values", "100")
    answers = finals(runs)
    assert answers["bpf"] == answers["user"]
    assert buckets(answers["bpf"]) == expected_len_buckets()
    assert (answers["bpf"]["min"], answers["bpf"]["max"], answers["bpf"]["sum"]) == (
        -200, 700, sum(value * n for value, n in LEN_VALUES.items()))


def test_latency_of_sleeps_and_of_calls_that_return_at_once(program):
    sleeps = Aggregation("latency", "-x", str(program), "nap", "--unit", "us", "--engine", "bpf")
    sleeps.ready()
    run_workload(program, "sleep", "3", "40")
    record = sleeps.final()
    assert record["count"] == 3 and buckets(record) == {(32768, 65536): 3} and 40_000 <= record["min"]
    zeros = Aggregation("latency", "-x", str(program), "work", "--unit", "ms", "--by", "comm", "--engine", "bpf")
    zeros.ready()
    run_workload(program, "flood", "3000")
    record = zeros.final()
    assert record["count"] == 3000 and record["min"] == 0 and counts(record, "comm") == {program.name[:15]: 3000}
    assert_summary_agrees_with_buckets(record)


def test_auto_chooses_the_bpf_engine_and_a_filter_goes_elsewhere(program):
    auto = Aggregation("count", "-x", str(program), "work", "--by", "comm")
    assert "kernel engine: a BPF program of ours" in auto.ready()
    filtered = Aggregation("count", "-x", str(program), "work", "--by", "comm", "--filter", "len > 0")
    assert "user engine:" in filtered.ready() and "the BPF engine applies no filter" in filtered.engine_line
    run_workload(program, "values", "100")
    assert counts(auto.final(), "comm") == {"kpt-alpha": 50, "kpt beta-2": 50}
    assert sum(counts(filtered.final(), "comm").values()) == 70
    refused = subprocess.run([sys.executable, "-m", "kprobe_tui", "count", "-x", str(program), "work", "--filter",
                              "len > 0", "--engine", "bpf", "-d", "1"], cwd=PROJECT, capture_output=True, text=True)
    assert refused.returncode == 2 and "--engine bpf: the BPF engine applies no filter" in refused.stderr


def test_our_own_threads_are_never_counted_and_a_full_map_counts_as_dropped(program, monkeypatch):
    """In process, as the TUI runs it: this process reads /dev/zero through CPython's _Py_read 100 times while a
    child does 50 reads; the child is counted, this process never. Then a map of 4 keys under a histogram of 10
    values."""
    from kprobe_tui.aggregate.model import Aggregation as Model
    from kprobe_tui.aggregate.model import Field
    from kprobe_tui.aggregate.run import AggregationRun
    from kprobe_tui.aggregate.targets import TargetBuilder
    from kprobe_tui.kernel.sources import locate

    kernel = locate()
    top = kernel.tracing()
    python = os.path.realpath(sys.executable)
    model = Model("count", keys=(Field("pid"),))
    targets = TargetBuilder(kernel, top.read("README"), lifetime.run_name(), binary=python).counting(
        ["_Py_read"], model, "")
    run = AggregationRun(top, model, targets)
    assert run.start().method == "bpf"
    try:
        with open("/dev/zero", "rb", buffering=0) as zero:
            for _ in range(100):
                zero.read(1)
        child = subprocess.Popen([python, "-c", "import os\nfor _ in range(50): os.read(os.open('/dev/zero', 0), 1)"])
        assert child.wait(timeout=60) == 0
        final = run.stop()
    finally:
        run.stop()
    assert final is not None
    by_pid = {entry.key[0]: entry.stats.count for entry in final.total.entries}
    assert os.getpid() not in by_pid and by_pid[child.pid] >= 50, by_pid  # its 50, and its start's own reads

    monkeypatch.setattr(bpf_engine, "MAX_KEYS", 4)
    model = Model("hist", value=Field("len"))
    targets = TargetBuilder(kernel, top.read("README"), lifetime.run_name(), binary=str(program)).histogram(
        "work len", "len", model, "")
    run = AggregationRun(top, model, targets, engine="bpf")
    run.start()
    try:
        run_workload(program, "values", "100")
        final = run.stop()
    finally:
        run.stop()
    assert final is not None and final.total.dropped == 60 and final.total.count == 40


def test_a_program_the_verifier_refuses_is_named_with_its_reason():
    with pytest.raises(bpf.BpfError, match=r"loading the BPF program kptui_bad: Permission denied \(R0 !read_ok\)"):
        bpf.Program([bpf.exit_()], "kptui_bad")


def test_a_user_without_the_capabilities_is_told_why_and_bpf_is_not_asked_for_what_it_does_not_answer():
    script = "import os; os.setgid(65534); os.setuid(65534)\nfrom kprobe_tui.kernel import bpf\nprint(bpf.supported())"
    said = subprocess.run([sys.executable, "-c", script], cwd=PROJECT, capture_output=True, text=True)
    assert said.stdout.strip() == "loading BPF programs needs CAP_BPF and CAP_PERFMON (or root)", said.stderr
    from kprobe_tui.aggregate.model import Aggregation as Model
    from kprobe_tui.aggregate.offer import KernelOffer, choose
    with pytest.raises(UserError, match="--engine bpf: not a question the BPF engine answers"):
        choose("bpf", Model("count"), KernelOffer(False, False, False, False, False), profile_only=False, uprobes=True,
               filter_refusal=None)
