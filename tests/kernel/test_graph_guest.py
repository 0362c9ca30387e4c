"""``kprobe-tui graph`` in a guest, where the function_graph tracer runs, against ``perf ftrace -G`` (the oracle)
on the same command: the same call paths, called as often; the tracer given back as it was found, after a
normal end and after a SIGKILL (by ``cleanup``); refused while someone else's tracer runs."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest
from harness import PROJECT

from kprobe_tui.stream.callgraph import GraphReader, summarize

pytestmark = pytest.mark.kernel

READS = 40
WORKLOAD = ["dd", "if=/dev/zero", "of=/dev/null", "bs=1", f"count={READS}"]
# Interrupts land inside any call at random: their entry and exit work shows even with funcgraph-irqs off.
INTERRUPT_WORK = ("irq_enter_rcu", "irq_exit_rcu", "idle_cpu", "__sysvec_apic_timer_interrupt", "handle_softirqs",
                  "__do_softirq")
SETTINGS = ("current_tracer", "set_graph_function", "set_graph_notrace", "max_graph_depth", "set_ftrace_pid", "options/funcgraph-proc",
            "options/funcgraph-tail", "options/funcgraph-irqs", "tracing_on")


def kprobe_tui(*words: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kprobe_tui", *words], cwd=PROJECT, capture_output=True, text=True,
                          timeout=300, **kwargs)


def paths(totals) -> dict[tuple[str, ...], int]:
    return {entry.path: entry.calls for entry in totals if not set(entry.path) & set(INTERRUPT_WORK)}


def settings(tracefs) -> dict[str, str]:
    return {name: tracefs.read(name) for name in SETTINGS}


def test_graph_gives_perf_ftraces_call_paths_and_gives_the_tracer_back(tracefs):
    if shutil.which("perf") is None:
        pytest.skip("perf is not installed (Debian: linux-perf)")
    # An instance that sets its own size, as every tail and count does: the kernel then never grows the top
    # level's 7 KB boot buffer, where a graph of these reads lost 240 entries (45 calls kept 21).
    os.mkdir(tracefs.path("instances/kptui_graph_sized"))
    try:
        tracefs.path("instances/kptui_graph_sized/buffer_size_kb").write_text("64\n")
    finally:
        os.rmdir(tracefs.path("instances/kptui_graph_sized"))
    before, buffer_before = settings(tracefs), tracefs.read("buffer_size_kb")
    ours = kprobe_tui("graph", "vfs_read", "--depth", "3", "--json", "--", *WORKLOAD)
    assert ours.returncode == 0, ours.stderr
    assert settings(tracefs) == before
    if "expanded" not in buffer_before:  # 6.1: the size it grew is given back (6.12 grows it with the tracer)
        assert tracefs.read("buffer_size_kb") == buffer_before
    report = json.loads(ours.stdout)
    assert report["lost"] == 0  # orphans (a call's lines begun before the start) seen on 6.12 after the suite: 5
    mine = {tuple(p["path"]): p["calls"] for p in report["paths"] if not set(p["path"]) & set(INTERRUPT_WORK)}
    # perf ftrace keeps the small buffer unless told: -m gives it the size our graph takes
    perf = subprocess.run(["perf", "ftrace", "-G", "vfs_read", "--graph-opts", "depth=3,noirqs", "-m", "1408K", "--",
                           *WORKLOAD], capture_output=True, text=True, timeout=300)
    assert perf.returncode == 0, perf.stderr
    theirs = paths(summarize(GraphReader().feed(perf.stdout.splitlines())))
    assert mine == theirs  # the same call paths, called as often (40 reads of /dev/zero and the loader's 5)
    assert mine[("vfs_read", "rw_verify_area")] == mine[("vfs_read",)] >= READS
    assert report["threads"] and all(thread.startswith("dd-") for thread in report["threads"])
    printed = kprobe_tui("graph", "vfs_read", "--depth", "2", "--", *WORKLOAD)
    assert printed.returncode == 0, printed.stderr
    header = printed.stdout.splitlines()[0]
    columns, *rows = [line for line in printed.stdout.splitlines() if not line.startswith("#")]
    assert columns.split() == ["calls", "total", "us", "self", "us", "call", "path"]
    parsed = [re.fullmatch(r"\s*(\d+) +\S+ +\S+  ( *)(\S+)", row) for row in rows]
    top = [int(row[1]) for row in parsed if row and not row[2]]  # the rows of the calls themselves, not callees
    assert header.startswith(f"# vfs_read: {sum(top)} calls on 1 thread (dd-") and "    rw_verify_area" in printed.stdout
    bounded = kprobe_tui("graph", "vfs_read", "--depth", "1", "--max-calls", "3", "--", *WORKLOAD)
    assert bounded.returncode == 0, bounded.stderr
    assert bounded.stdout.splitlines()[0].endswith(
        "; stopped --max-calls 3 reached; more calls came: a larger --max-calls (or -d SECONDS) shows them")


@pytest.fixture
def run_locks():
    """/run/kprobe-tui writable as on a real machine (the guest's /run is the host's, read-only): runs lock their
    names and leave their records there."""
    locks = "/run/kprobe-tui"
    mounted = not os.access(locks, os.W_OK)
    if mounted:
        os.makedirs(locks, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", locks], check=True)
    yield
    if mounted:
        subprocess.run(["umount", locks], check=True)


def test_a_busy_tracer_is_refused_and_a_sigkilled_graph_is_mended_by_cleanup(tracefs, run_locks):
    before = settings(tracefs)
    tracefs.write("current_tracer", "function", append=False)
    try:
        busy = kprobe_tui("graph", "vfs_read", "--", "true")
        assert busy.returncode == 2 and "the kernel's tracer is in use: current_tracer is 'function'" in busy.stderr
    finally:
        tracefs.write("current_tracer", "nop", append=False)
    unknown = kprobe_tui("graph", "no_such_function_here", "--", "true")
    assert unknown.returncode == 2 and "does not know it" in unknown.stderr
    assert settings(tracefs) == before
    run = subprocess.Popen([sys.executable, "-m", "kprobe_tui", "graph", "vfs_read", "--duration", "60"], cwd=PROJECT,
                           stderr=subprocess.PIPE, text=True)
    try:
        assert "Hit Ctrl-C" in run.stderr.readline()
        assert tracefs.read("current_tracer").strip() == "function_graph"
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
    said = kprobe_tui("cleanup", "--dry-run")
    assert "would give back the function_graph tracer that kptui_" in said.stdout, said.stdout + said.stderr
    mended = kprobe_tui("cleanup")
    assert "gave back the function_graph tracer" in mended.stdout, mended.stdout + mended.stderr
    assert settings(tracefs) == before


def test_sigterm_gives_the_tracer_back(tracefs):
    before = settings(tracefs)
    run = subprocess.Popen([sys.executable, "-m", "kprobe_tui", "graph", "vfs_read", "--duration", "60"], cwd=PROJECT,
                           stderr=subprocess.PIPE, text=True)
    try:
        assert "Hit Ctrl-C" in run.stderr.readline()
        time.sleep(0.5)
        run.send_signal(signal.SIGTERM)
        run.wait(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
    assert settings(tracefs) == before
