"""``count --by stack`` says what it will cost before it starts (issue 28): a program calls work() at a rate
it keeps itself (a busy wait to each call's due time) and prints the rate it kept; the rate the estimate
measured must be that rate within a factor; above a quarter of a CPU a run with no terminal to ask is
refused without --yes, leaving nothing in tracefs."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kprobe_tui.stream.stacks import MAX_STACKS_ENV
from tests.live.test_stacks_live import build

pytestmark = pytest.mark.live

PROJECT = Path(__file__).resolve().parents[2]
TRACING = Path("/sys/kernel/tracing")
PACED = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
__attribute__((noinline)) long work(long x) { asm volatile("" ::: "memory"); return x + 1; }
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
int main(int argc, char **argv) {
    double rate = atof(argv[1]), seconds = atof(argv[2]), start = now(), due = start;
    long calls = 0, total = 0;
    while (due - start < seconds) {
        while (now() < due) ;
        total += work(calls++);
        due = start + calls / rate;
    }
    printf("%.1f\n", calls / (now() - start));
    return total == 0;
}
"""
ESTIMATE = re.compile(r"kprobe-tui: work: ~([\d,]+) hits/s; counting its stacks in user space costs")


@pytest.fixture(scope="module")
def paced(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("stack_cost")
    (directory / "paced.c").write_text(PACED)
    subprocess.run(["gcc", "-O1", "-fno-omit-frame-pointer", "-o", str(directory / "kpt-paced"),
                    str(directory / "paced.c")], check=True)
    return directory / "kpt-paced"


def count(*args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "kprobe_tui", "count", *args], cwd=PROJECT, text=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, **(env or {})})


def tracefs_state() -> tuple[str, list[str]]:
    return (TRACING / "uprobe_events").read_text(), sorted(os.listdir(TRACING / "instances"))


def test_the_estimate_is_the_rate_the_program_kept_and_a_cheap_run_starts(paced, tracefs_root):
    program = subprocess.Popen([str(paced), "2000", "8"], stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(0.5)
        run = count("-x", str(paced), "work", "--by", "stack", "-d", "1", "--json")
        out, err = run.communicate(timeout=120)
    finally:
        kept = float(program.communicate(timeout=60)[0])
    assert run.returncode == 0, err
    measured = float(ESTIMATE.search(err)[1].replace(",", ""))
    assert kept / 1.5 < measured < kept * 1.5, (kept, err)
    assert "(measured 37 us a hit)" in err and '"final": true' in out


def test_a_costly_run_without_a_terminal_is_refused_without_yes_and_leaves_nothing(paced, tracefs_root):
    before = tracefs_state()
    program = subprocess.Popen([str(paced), "50000", "8"], stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        run = count("-x", str(paced), "work", "--by", "stack", "-d", "1")
        _, err = run.communicate(timeout=120)
    finally:
        program.wait(timeout=60)
    assert run.returncode != 0 and ESTIMATE.search(err), err
    assert "not started: counting these stacks would take more than 25% of a CPU" in err
    assert "--filter" in err and "--yes" in err and "above ~26,000 hits/s user space loses hits" in err
    assert tracefs_state() == before



def test_a_run_that_reaches_its_cap_of_distinct_stacks_stops_saying_which_and_how_to_raise_it(tmp_path, tracefs_root):
    """Four call paths of leaf() (via_a, and via_b unrolled) against a cap of two: the run stops within a few
    seconds of the third, with its table and the way to raise the cap, and leaves nothing in tracefs."""
    program = build(tmp_path, "kpt_cost_cap", "-fno-omit-frame-pointer")
    before = tracefs_state()
    run = count("-x", str(program), "leaf", "--by", "stack", "-d", "120", "--json", env={MAX_STACKS_ENV: "2"})
    assert run.stderr is not None
    try:
        line = run.stderr.readline()
        while " engine: " not in line:
            assert line, run.communicate()
            line = run.stderr.readline()
        subprocess.run([str(program)], check=True)
        started = time.monotonic()
        out, err = run.communicate(timeout=60)
    finally:  # a run that did not stop at its bound is stopped here, its probe and instance with it
        if run.poll() is None:
            run.send_signal(signal.SIGINT)
            run.communicate(timeout=60)
    assert time.monotonic() - started < 10 and run.returncode == 0, err
    assert "stopped: 2 distinct stacks, the most a run keeps; " in err and f"raise {MAX_STACKS_ENV}" in err, err
    record = json.loads(out.splitlines()[-1])
    assert record["final"] and len(record["stacks"]) == 2 and record["dropped"] > 0
    assert tracefs_state() == before
