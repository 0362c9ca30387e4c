"""The student readers (our perf_event_open, a perf binary's record) beside the instance reader (trace_pipe)
on the same uprobe flood.

Needs root and uprobes (this machine); root may take any reader, so all run here on the same
program: tests/live/c/tail_values.c compiled, a uprobe on hit() (n, a string, an int array), and
PROCS copies of the program each making CALLS hits at once (2 copies: both CPUs trap). For each
reader it prints the hits the programs made per second, what the reader stored and lost, how long
after the flood it was done, and its CPU: events stored per CPU-second of this process (the reader's
thread and the store; the programs are children, not counted; perf record's own CPU, a child too, is
printed apart). The issue's goal: no silent loss
(stored + lost = hits), and the student reader's rate within 2x of the instance reader's.
Usage: python benchmarks/bench_student_reader.py [--calls N] [--procs P] [--rounds R]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kprobe_tui.kernel.perfevent import ring_pages
from kprobe_tui.kernel.sources import locate
from kprobe_tui.kernel.tracefs import Tracefs
from kprobe_tui.probes.symbols import ElfSymbols
from kprobe_tui.stream.session import StudentSession, TailSession

ROOT = Path(__file__).resolve().parents[1]
PERF = "/usr/bin/perf"
GROUP = "kptbenchstudent"
PROBE = "n=%di:s64 s=+0(%si):string arr=+0(%dx):s32[4]"


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def flood(session: TailSession, binary: Path, calls: int, procs: int) -> dict[str, float]:
    """Start the session, run the programs, wait until every hit is stored or counted lost (or 30 s)."""
    session.start(lambda update: None)
    try:
        time.sleep(0.2)  # the reader is polling
        cpu, start = cpu_seconds(), time.perf_counter()
        programs = [subprocess.Popen([str(binary), str(calls), "quiet"]) for _ in range(procs)]
        for program in programs:
            program.wait()
        produced = time.perf_counter() - start
        hits, deadline = calls * procs, time.perf_counter() + 30
        while session.store.total + session.reader.lost < hits and time.perf_counter() < deadline:
            if isinstance(session, StudentSession):  # the kernel says a loss with the ring's next record
                subprocess.run(["true"], check=True)
            time.sleep(0.02)
        done = time.perf_counter() - start
        used = cpu_seconds() - cpu
    finally:
        session.stop()
    return {"produced": produced, "done": done, "cpu": used, "stored": session.store.total, "lost": session.reader.lost,
            "hits": hits}


def line(name: str, run: dict[str, float]) -> str:
    silent = run["hits"] - run["stored"] - run["lost"]
    return (f"   {name:<34} {run['hits'] / run['produced']:>9,.0f} hits/s made, stored {run['stored']:>9,.0f} "
            f"lost {run['lost']:>7,.0f} (unaccounted {silent:,.0f}), done {(run['done'] - run['produced']) * 1000:>4.0f} ms "
            f"after, {run['stored'] / run['done']:>9,.0f} stored/s, {run['stored'] / max(run['cpu'], 1e-9):>9,.0f} per CPU-second")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--procs", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("needs root (it makes a uprobe)", file=sys.stderr)
        return 2
    tracefs = locate().tracefs
    assert tracefs is not None
    top = Tracefs(tracefs)
    with tempfile.TemporaryDirectory() as work:
        binary = Path(work) / "tail_values"
        subprocess.run(["gcc", "-O1", "-o", str(binary), str(ROOT / "tests/live/c/tail_values.c")], check=True)
        offset = ElfSymbols(binary).function("hit").file_offset
        top.write("uprobe_events", f"p:{GROUP}/hit {binary}:0x{offset:x} {PROBE}\n")
        try:
            print(f"{args.procs} programs x {args.calls:,} uprobe hits, {args.rounds} rounds a reader "
                  f"(perf ring: {ring_pages()} pages a CPU; instance: the kernel's default buffer)")
            labels = {"instance": "instance reader (trace_pipe text)", "student": "student reader (perf_event_open)",
                      "perf": "student reader (perf record pipe)"}
            per_cpu: dict[str, list[float]] = {name: [] for name in labels}
            for round_number in range(args.rounds):
                print(f"round {round_number + 1}")
                for name, label in labels.items():
                    session = (TailSession if name == "instance" else StudentSession)(
                        top, [f"{GROUP}/hit"], max_events=args.calls * args.procs + 10)
                    if name == "perf":
                        session.perf = PERF
                    children = resource.getrusage(resource.RUSAGE_CHILDREN)
                    run = flood(session, binary, args.calls, args.procs)
                    per_cpu[name].append(run["stored"] / max(run["cpu"], 1e-9))
                    after = resource.getrusage(resource.RUSAGE_CHILDREN)
                    spent = after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime
                    print(line(label, run) + (f" (+ perf and the programs: {spent:.2f} CPU-s)" if name == "perf" else ""))
            medians = {name: statistics.median(rates) for name, rates in per_cpu.items()}
            print("median events per CPU-second of this process: " + ", ".join(f"{name} {rate:,.0f}" for name, rate in medians.items())
                  + f": our perf_event_open at {medians['student'] / medians['instance']:.2f} x the instance reader (goal >= 0.5)")
        finally:
            top.write("uprobe_events", f"-:{GROUP}/hit\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
