"""count, hist and latency with the kernel engines, inside the 6.1 and 6.12 guests.

A program with known behaviour (tests/live/c/aggregate.c) gives exact answers through our BPF programs,
through hist triggers and synthetic events, and through the profile files; the user-space engine, run at
the same time on the same workload, gives the same ones. Then the kernel's own functions through the CLI (``count 'vfs_*'``,
``latency vfs_read --by comm``, ``hist vfs_read count``), and nothing left after SIGTERM or after
SIGKILL and ``cleanup``: the ``tracefs`` fixture compares kprobe_events, dynamic_events (uprobes and
synthetic events) and instances/ (where every trigger of ours lives) before and after each test.
Python runs 15-25x slower here: many runs share one workload, and the CLI runs once per question.
"""

from __future__ import annotations

import copy
import signal
import subprocess

import pytest

from kprobe_tui.aggregate.model import Aggregation as Model
from kprobe_tui.aggregate.model import Field, Linear
from kprobe_tui.aggregate.run import AggregationRun
from kprobe_tui.aggregate.targets import TargetBuilder
from kprobe_tui.kernel import lifetime
from kprobe_tui.kernel.events import Events
from tests.aggregate_cli import LEN_VALUES, PROJECT, Aggregation, assert_summary_agrees_with_buckets, buckets, build, counts, expected_len_buckets, run_workload

pytestmark = pytest.mark.kernel

# Just past 2^17 us: [128K, 256K) holds it even when the guest's timers run late (33 ms sleeps came out
# up to 66 ms in a loaded 6.1 guest).
SLEEP_MS = 140
READS, READ_SIZE = 25, 3000


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    return build(tmp_path_factory.mktemp("aggregate") / "kpt_aggregate_guest")


def _start(guest_sources, program, kind: str, model: Model, engine: str, what: str, filter_text: str = ""):
    top = guest_sources.tracing()
    taken = [event.event for event in Events(top).events_in(lifetime.run_name())]  # of the runs started before
    build_targets = TargetBuilder(guest_sources, top.read("README"), lifetime.run_name(), binary=str(program),
                                  taken=taken)
    if kind == "count":
        targets = build_targets.counting([what], model, filter_text)
    elif kind == "hist":
        targets = build_targets.histogram("work", what, model, filter_text)
    else:
        targets = build_targets.latency(what, model, filter_text)
    run = AggregationRun(top, model, targets, filter_text, engine)
    run.start()
    return run


QUESTIONS = {
    "by comm": ("count", Model("count", keys=(Field("comm"),)), "work", ""),
    "by port": ("count", Model("count", keys=(Field("port", "ntohs"), Field("pid"))), "work", "ntohs(port) == 53"),
    "log2": ("hist", Model("hist", value=Field("len")), "len", ""),
    "linear by comm": ("hist", Model("hist", keys=(Field("comm"),), value=Field("len"), buckets=Linear(-100, 500, 200)),
                       "len", ""),
    "sleep": ("latency", Model("latency", unit="us"), "nap", ""),
    "recursion": ("latency", Model("latency", keys=(Field("comm"),), unit="ms"), "rec", ""),
}


def test_kernel_engines_are_exact_and_agree_with_the_user_space_engine(tracefs, guest_sources, program):
    """kernel: what auto takes (our BPF programs; hist triggers for the filter they cannot say), hist: the hist
    triggers for every question, user: our trace instance read and counted here."""
    engines = ("kernel", "hist", "user")
    runs = {}
    try:
        for name, (kind, model, what, filter_text) in QUESTIONS.items():
            for engine in engines:
                runs[name, engine] = _start(guest_sources, program, kind, model, engine, what, filter_text)
        assert {name: runs[name, "kernel"].choice.method for name in QUESTIONS} == {
            name: "hist" if QUESTIONS[name][3] else "bpf" for name in QUESTIONS}
        assert {runs[name, "hist"].choice.method for name in QUESTIONS} == {"hist"}
        run_workload(program, "values", "100")
        run_workload(program, "sleep", "3", str(SLEEP_MS))
        run_workload(program, "recurse", "2")
        finals = {key: run.stop().total.to_json() for key, run in runs.items()}
    finally:
        for run in runs.values():
            run.stop()
    answers = {engine: {name: finals[name, engine] for name in QUESTIONS} for engine in engines}
    for kernel in (answers["kernel"], answers["hist"]):
        assert counts(kernel["by comm"], "comm") == {"kpt-alpha": 50, "kpt beta-2": 50}
        [(port, pid)] = [tuple(entry["key"].values()) for entry in kernel["by port"]["entries"]]
        assert port == 53 and kernel["by port"]["count"] == 50
        assert buckets(kernel["log2"]) == expected_len_buckets()
        assert (kernel["log2"]["sum"], kernel["log2"]["min"], kernel["log2"]["max"]) == (
            sum(v * n for v, n in LEN_VALUES.items()), -200, 700)
        assert buckets(kernel["linear by comm"]) == {(None, -100): 10, (-100, 100): 20, (100, 300): 20,
                                                     (300, 500): 20, (500, None): 30}
        recursion = kernel["recursion"]
        assert recursion["count"] == 2 and recursion["unmatched"] == 6 and recursion["min"] >= 2
    for answer in answers.values():  # 140 ms each, and late only by the guest's timers (once 270 ms, loaded)
        sleep = answer["sleep"]
        assert sleep["count"] == 3 and sleep["min"] >= SLEEP_MS * 1000 and min(buckets(sleep)) == (131072, 262144)
    for kernel in ("kernel", "hist"):
        for name in QUESTIONS:
            _assert_same(name, copy.deepcopy(answers[kernel][name]), copy.deepcopy(answers["user"][name]))


def _assert_same(name: str, mine: dict, theirs: dict) -> None:
    """One question's answers from a kernel engine and the user-space engine: equal, latencies within a bound."""
    assert (mine.pop("engine"), theirs.pop("engine")) == ("kernel", "user")
    for record in (mine, theirs):
        record.pop("start"), record.pop("end")
    if QUESTIONS[name][0] == "latency":
        # Each run has its own probe and instance, and each stamps an event as it records it, one after
        # the other: a microsecond apart on hardware, but up to a few ms here, where QEMU runs the two
        # vCPUs in turns on one thread (a 33 ms sleep came out 1.7 ms apart; a 2 ms one 7 ms in one
        # engine and 8 in the other; a 140 ms one 149 ms in one and 172 in the other, 16 %). Counts
        # agree exactly; each call's time within 25 %, and so its bucket, or the next one when it sits
        # on a boundary (each engine's sleeps are also checked against the known sleep above); a short call
        # within 20 us (the recursion's two innermost calls of 4-8 us summed 15 us in one engine and 10 in the
        # other in the 6.1 guest, 11 and 25 in the 6.12 guest: 7 us a call apart), a sum by that a call.
        for field in ("sum", "min", "max", "avg"):
            a, b = mine.pop(field), theirs.pop(field)
            slack = 20 * (mine["count"] if field == "sum" else 1)
            assert abs(a - b) <= max(slack, 0.25 * abs(a)), (name, field, a, b)
        assert _adjacent(mine.pop("buckets"), theirs.pop("buckets")), name
        for record in (mine, theirs):
            for entry in record.get("entries", []):
                for field in ("sum", "min", "max", "avg", "buckets"):
                    entry.pop(field)
    assert mine == theirs, name


def _adjacent(mine: list[dict], theirs: list[dict]) -> bool:
    """Two histograms of the same calls where each call is in the same bucket or a neighbour."""
    def calls(found):
        return sorted(bucket["low"] for bucket in found for _ in range(bucket["count"]))

    ours, others = calls(mine), calls(theirs)
    return len(ours) == len(others) and all(max(a, b) <= 2 * max(min(a, b), 1) for a, b in zip(ours, others))


def _cli(*args: str) -> Aggregation:
    run = Aggregation(*args)
    run.ready()
    return run


def test_count_vfs_glob_top_n_from_kprobe_profile(tracefs):
    run = _cli("count", "vfs_*", "--top", "5")
    assert "kernel engine: kprobe_profile counts every hit" in run.engine_line
    for _ in range(3):
        subprocess.run(["cat", "/etc/hostname"], stdout=subprocess.DEVNULL, check=True)
    record = run.final()
    hits = counts(record, "probe")
    assert len(hits) == 5 and hits.get("vfs_read", 0) >= 3 and record["engine"] == "kernel"
    assert sorted(hits.values(), reverse=True) == list(hits.values())  # most hits first
    # vfs_caches_init is __init code, freed after boot: left out of the glob, and said so
    assert any("skipped" in line and "freed after boot" in line and "vfs_caches_init" in line
               for line in run.stderr_lines), run.stderr_lines


def test_latency_and_histogram_of_vfs_read_by_comm_agree_across_engines(tracefs, program):
    engines = ("bpf", "hist", "user")
    latency = {engine: _cli("latency", "vfs_read", "--by", "comm", "--engine", engine) for engine in engines}
    sizes = {engine: _cli("hist", "vfs_read", "count", "--by", "comm", "--engine", engine) for engine in engines}
    assert "hist triggers and a synthetic event" in latency["hist"].engine_line
    assert "a BPF program of ours" in latency["bpf"].engine_line and "a BPF program of ours" in sizes["bpf"].engine_line
    run_workload(program, "read", str(READS), str(READ_SIZE))
    records = {(what, engine): run.final() for what, runs in (("latency", latency), ("hist", sizes))
               for engine, run in runs.items()}
    for engine in engines:
        reader = [e for e in records["latency", engine]["entries"] if e["key"]["comm"] == "kpt-reader"]
        assert [e["count"] for e in reader] == [READS], engine
        [sized] = [e for e in records["hist", engine]["entries"] if e["key"]["comm"] == "kpt-reader"]
        assert (sized["count"], sized["min"], sized["max"]) == (READS, READ_SIZE, READ_SIZE), engine
        assert sized["buckets"] == [{"low": 2048, "high": 4096, "count": READS}], engine


@pytest.mark.parametrize("engine", ["bpf", "hist"])
def test_latencies_of_zero_give_min_zero_and_a_summary_that_fits_the_buckets(tracefs, program, engine):
    """work() returns at once: in milliseconds nearly every call is 0 (hist triggers subtract timestamps
    already in ms, so some cross a tick: 1; our BPF program divides the nanoseconds, as bpftrace does), so a
    minimum tracked as the largest negated latency (0 negates to 0) would be wrong unless 0 is seen."""
    run = _cli("latency", "-x", str(program), "work", "--unit", "ms", "--by", "comm", "--engine", engine)
    run_workload(program, "flood", "3000")
    record = run.final()
    assert record["engine"] == "kernel" and record["count"] == 3000
    assert record["min"] == 0 and buckets(record)[0, 1] > 0, record
    assert_summary_agrees_with_buckets(record)


def test_sigterm_removes_triggers_synthetic_events_probes_and_instance(tracefs, program):
    run = _cli("latency", "-x", str(program), "nap", "--by", "comm", "--engine", "hist")
    run_workload(program, "sleep", "1", "1")
    assert "synthetic" in tracefs.read("dynamic_events")
    run.finish(signal.SIGTERM)
    assert run.returncode == -signal.SIGTERM  # the tracefs fixture checks that nothing is left


def test_sigkill_then_cleanup_removes_what_the_kernel_would_not_let_go(tracefs, program):
    """A killed run's instance holds triggers that read each other's variables: rmdir alone is refused."""
    run = _cli("latency", "-x", str(program), "nap", "--engine", "hist")
    run.finish(signal.SIGKILL)
    instance = f"{run.name}__agg1"
    assert tracefs.exists(f"instances/{instance}") and f"{run.name}__lat" in tracefs.read("dynamic_events")
    result = subprocess.run([__import__("sys").executable, "-m", "kprobe_tui", "cleanup"], cwd=PROJECT,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert f"removed instance {instance}" in result.stdout and f"removed synthetic/{run.name}__lat" in result.stdout
    assert f"removed {run.name}/nap" in result.stdout and f"removed {run.name}/nap__return" in result.stdout
