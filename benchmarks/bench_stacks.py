"""What counting stacks costs user space: the kernel engine (a hist table keyed by the stack) against the
user-space engine (the stack the kernel prints after each event, parsed and counted here), side by side.

A flood of vfs_read hits from one process (``dd bs=1``: a read() a byte), counted by ``--by stack``
filtered to its comm, by each engine in turn: our process's user CPU seconds (all threads, getrusage)
per million hits, sampling once a second as ``-i 1`` does. Needs root and kprobes with hist triggers
for the kernel engine, so it runs in a guest:
    python tests/kernel/harness.py shell debian-6.12 -- python3 benchmarks/bench_stacks.py
Usage: python benchmarks/bench_stacks.py [--calls N]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
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


def user_cpu() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_utime


def bench(calls: int) -> None:
    kernel = locate()
    top = kernel.tracing()
    print(f"vfs_read from `dd bs=1 count={calls:,}`, --by stack --filter 'comm == \"{COMM}\"'; "
          f"kernel {os.uname().release}; our user CPU (all threads) per million hits", flush=True)
    for engine in ("kernel", "user"):
        try:
            builder = TargetBuilder(kernel, top.read("README"), lifetime.run_name())
            targets = builder.counting(["vfs_read"], Aggregation("count"), f'comm == "{COMM}"')
            run = StackRun(top, targets, filter_text=f'comm == "{COMM}"', engine=engine)
            choice = run.start()
        except Exception as exc:  # this kernel cannot: say so and go on
            print(f"  {engine:<6} -- {getattr(exc, 'message', exc)}", flush=True)
            continue
        before, started = user_cpu(), time.perf_counter()
        flood = subprocess.Popen(["dd", "if=/dev/zero", "of=/dev/null", "bs=1", f"count={calls}"], stderr=subprocess.DEVNULL)
        samples = 1
        while flood.poll() is None:
            time.sleep(1.0)
            run.collect()
            samples += 1
        final = run.stop()
        spent, wall = user_cpu() - before, time.perf_counter() - started
        assert final is not None, "the run was started"
        hits = sum(final.counts.values())
        per_million = spent / hits * 1e6 if hits else float("nan")
        print(f"  {engine:<6} ({choice.method:<6}) {hits:>9,} hits in {len(final.counts)} stacks, {final.lost:,} lost  "
              f"user CPU {spent:6.2f} s = {per_million:7.2f} s per 1M hits ({hits / wall:>7,.0f} hits/s)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200_000, help="reads by dd (default 200,000)")
    bench(parser.parse_args().calls)


if __name__ == "__main__":
    main()
