"""``latency -x PROG FUNC --by stack`` on this machine's uprobes: one latency histogram a call path into FUNC,
as bpftrace's ``@[ustack] = hist(nsecs - @start[tid])`` gives (the user-space engine keeps each entry's stack
until its thread returns; tests/kernel/test_stack_latency_guest.py checks a kernel function against bpftrace)."""

from __future__ import annotations

import signal
import subprocess

import pytest

from kprobe_tui.stream.stacks import frame_symbol
from tests.aggregate_cli import Aggregation

pytestmark = pytest.mark.live

CALLS = 30
STEADY = 500
SOURCE = r"""
#include <time.h>
__attribute__((noinline)) void leaf(long micros) { struct timespec t = {0, micros * 1000}; nanosleep(&t, 0); }
__attribute__((noinline)) void via_short(void) { leaf(200); }
__attribute__((noinline)) void via_long(void) { leaf(5000); }
__attribute__((noinline)) int nest(int depth) { if (!depth) { leaf(100); return 0; } return nest(depth - 1) + 1; }
int main(int argc, char **argv) {
    if (argc > 1 && argv[1][0] == 's') for (int i = 0; i < %(steady)d; i++) via_long();  /* ~2.5 s of calls */
    else for (int i = 0; i < %(calls)d; i++) {
        if (argc > 1) { nest(2); continue; }
        via_short(); if (i %% 2 == 0) via_long();
    }
    struct timespec named = {0, 500000000}; nanosleep(&named, 0);  /* its frames are named from its maps while it lives */
    return 0;
}
"""


@pytest.fixture
def sleeper(tmp_path):
    (tmp_path / "sleeps.c").write_text(SOURCE % {"calls": CALLS, "steady": STEADY})
    subprocess.run(["gcc", "-O1", "-fno-omit-frame-pointer", "-o", str(tmp_path / "kpt_sleeps"), str(tmp_path / "sleeps.c")],
                   check=True)
    return tmp_path / "kpt_sleeps"


def test_each_call_path_gets_the_time_of_its_own_calls(sleeper):
    """leaf sleeps 200 us through via_short (30 calls) and 5 ms through via_long (15 calls)."""
    run = Aggregation("latency", "-x", str(sleeper), "leaf", "--by", "stack")
    text = Aggregation("latency", "-x", str(sleeper), "leaf", "--by", "stack,comm", "--unit", "ms", json_output=False)
    try:
        for each in (run, text):
            assert "user engine: a uprobe's stack is the program's" in each.ready()
        subprocess.run([str(sleeper)], check=True)
        record = run.final()
        assert record["kind"] == "latency" and record["unit"] == "us" and record["count"] == CALLS + CALLS // 2
        assert not record.get("unmatched") and not record.get("lost")
        paths = {tuple(frame_symbol(frame) for frame in entry["key"]["stack"])[-3:]: entry for entry in record["entries"]}
        assert set(paths) == {("main", "via_short", "leaf"), ("main", "via_long", "leaf")}
        short, long = paths["main", "via_short", "leaf"], paths["main", "via_long", "leaf"]
        assert (short["count"], long["count"]) == (CALLS, CALLS // 2)
        assert 200 <= short["min"] and short["max"] < 5000 <= long["min"]  # each call timed under its own path

        text.proc.send_signal(signal.SIGINT)
        out, _ = text.proc.communicate(timeout=300)
        lines = out.splitlines()
        head = lines.index("@msecs[")  # the path with the most hits first: via_short's
        assert lines[head + 1] == f"    leaf+0x0 [{sleeper.name}]" and lines[head + 2].startswith("    via_short+0x")
        assert f", {sleeper.name}]:" in lines[head + 2:head + 8]
        assert "count 15, " in out and "count 30, " in out
    finally:  # a failed check leaves no run behind (its probes and instance go with it)
        for each in (run, text):
            if each.proc.poll() is None:
                each.finish()


def test_a_nested_call_times_the_innermost_and_counts_the_outer_returns_unmatched(sleeper):
    """nest(2) calls nest(1) calls nest(0): each thread's entry is kept once, as ``latency`` (and bpftrace's
    @start[tid]) keeps it, so the innermost call is timed under its own stack and the two outer returns find none.
    The return probe swapped the outer calls' return addresses for its page while they last: the kernel's walk
    gives that page there (perf names it [uprobes]), our capture of the caller the innermost call's own."""
    run = Aggregation("latency", "-x", str(sleeper), "nest", "--by", "stack")
    try:
        run.ready()
        subprocess.run([str(sleeper), "nested"], check=True)
        record = run.final()
        assert record["count"] == CALLS and record["unmatched"] == 2 * CALLS
        [entry] = record["entries"]
        stack = [frame_symbol(frame) for frame in entry["key"]["stack"]]
        assert stack[-4:] == ["[uprobes]", "[uprobes]", "nest", "nest"], entry["key"]["stack"]
    finally:
        if run.proc.poll() is None:
            run.finish()


def test_each_interval_gives_the_calls_of_that_interval(sleeper):
    """-i 1 over ~2.5 s of calls: every interval's histogram has its own calls, and they add up to all of them
    (the engine's copy of the values once shared the Counters it goes on adding to: every interval after the
    first came out empty)."""
    run = Aggregation("latency", "-x", str(sleeper), "leaf", "--by", "stack", "--interval", "1")
    try:
        run.ready()
        subprocess.run([str(sleeper), "steady"], check=True)
        records = run.finish()
        assert run.returncode == 0, run.stderr_lines
        counts = [record["count"] for record in records]
        assert sum(counts) == STEADY and len(counts) >= 3 and all(counts[:2]), counts
    finally:
        if run.proc.poll() is None:
            run.finish()
