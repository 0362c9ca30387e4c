"""What counting stacks costs: the kernel engine (a hist table keyed by the stack) against the user-space
engine (the stack the kernel prints after each event, parsed and counted here), side by side.

A flood of vfs_read hits from one process (``dd bs=1``: a read() a byte), counted by ``--by stack``
filtered to its comm, by each engine in turn: our process's CPU seconds (user and system, all threads,
getrusage) per million hits, sampling once a second as ``-i 1`` does; beside it, what the hits cost the
traced program (dd's user+system CPU a hit, less a bare dd's: the stack walked and stored or printed in its
own thread). ``--uprobe`` floods a uprobe instead (tests/live/c/aggregate.c's work(), counted by the
user-space engine: the kernel keys no table by a user stack), which runs on this machine too. ``count --by
stack`` estimates a run's cost from these figures (aggregate/estimate.py). Needs root; the vfs_read flood
needs kprobes with hist triggers, so it runs in a guest:
    python tests/kernel/harness.py shell debian-6.1 -- python3 benchmarks/bench_stacks.py
Usage: python benchmarks/bench_stacks.py [--calls N] [--uprobe]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kprobe_tui.aggregate.model import Aggregation  # noqa: E402
from kprobe_tui.aggregate.stackrun import StackRun  # noqa: E402
from kprobe_tui.aggregate.targets import TargetBuilder  # noqa: E402
from kprobe_tui.kernel import lifetime  # noqa: E402
from kprobe_tui.kernel.sources import locate  # noqa: E402

COMM = "dd"


def our_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def uprobe_program(directory: str) -> str:
    program = os.path.join(directory, "kpt-stackflood")
    subprocess.run(["gcc", "-O1", "-fno-omit-frame-pointer", "-o", program, str(ROOT / "tests/live/c/aggregate.c")],
                   check=True)
    return program


def bench(calls: int, uprobe: str | None) -> None:
    kernel = locate()
    command = [uprobe, "flood", str(calls)] if uprobe else ["dd", "if=/dev/zero", "of=/dev/null", "bs=1", f"count={calls}"]

    def flood() -> subprocess.Popen:
        return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    before = children_cpu()
    flood().wait()
    bare = (children_cpu() - before) / calls
    top = kernel.tracing()
    where, spec, text = ("work() of `aggregate flood`", "work", "") if uprobe else (
        f"vfs_read from `dd bs=1 count={calls:,}`", "vfs_read", f'comm == "{COMM}"')
    print(f"{where}, --by stack{f' --filter {text!r}' if text else ''}; kernel {os.uname().release}; our CPU "
          f"(user+system, all threads) per million hits; the traced program alone: {bare * 1e6:.2f} us a call", flush=True)
    for engine in ("user",) if uprobe else ("kernel", "user"):
        try:
            builder = TargetBuilder(kernel, top.read("README"), lifetime.run_name(), binary=uprobe)
            targets = builder.counting([spec], Aggregation("count"), text, stacks=True)
            run = StackRun(top, targets, filter_text=text, engine=engine)
            choice = run.start()
        except Exception as exc:  # this kernel cannot: say so and go on
            print(f"  {engine:<6} -- {getattr(exc, 'message', exc)}", flush=True)
            continue
        before, started, traced_before = our_cpu(), time.perf_counter(), children_cpu()
        flooding = flood()
        samples = 1
        while flooding.poll() is None:
            time.sleep(1.0)
            run.collect()
            samples += 1
        final = run.stop()
        spent, wall = our_cpu() - before, time.perf_counter() - started
        traced = (children_cpu() - traced_before) / calls - bare
        assert final is not None, "the run was started"
        hits = sum(final.counts.values())
        per_million = spent / hits * 1e6 if hits else float("nan")
        print(f"  {engine:<6} ({choice.method:<6}) {hits:>9,} hits in {len(final.counts)} stacks, {final.lost:,} lost  "
              f"our CPU {spent:6.2f} s = {per_million:7.2f} s per 1M hits ({hits / wall:>7,.0f} hits/s); "
              f"the traced program's CPU +{traced * 1e6:.2f} us a hit", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200_000, help="reads by dd, or calls of work() (default 200,000)")
    parser.add_argument("--uprobe", action="store_true", help="a uprobe flood instead of vfs_read (runs on this machine)")
    args = parser.parse_args()
    if not args.uprobe:
        bench(args.calls, None)
        return
    with tempfile.TemporaryDirectory() as directory:
        bench(args.calls, uprobe_program(directory))


if __name__ == "__main__":
    main()
