"""Benchmark: `kprobe-tui funcs PATTERN` and `kprobe-tui probe -F PATTERN` against `perf probe --funcs PATTERN`.

Issue 12 item 4: both take at most the wall time of perf's --funcs on the same machine (1.34x before).
Each round runs the three commands once, in turn (so load on a shared machine falls on all of them
alike), as fresh processes with their output to a file; after --repeat rounds it prints each one's
median, spread (min-max and the interquartile range) and its ratio to perf's median, then the load
average before and after. Also prints what every fresh Python process pays before our code runs.

    python benchmarks/bench_funcs.py [--pattern 'tcp_*'] [--repeat 41]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

KPROBE_TUI = [sys.executable, "-m", "kprobe_tui"]


def wall(argv: list[str]) -> tuple[float, int, int]:
    """Wall seconds, exit status and output lines of one process."""
    with tempfile.TemporaryFile() as out:
        start = time.perf_counter()
        status = subprocess.call(argv, stdout=out, stderr=subprocess.DEVNULL)
        elapsed = time.perf_counter() - start
        out.seek(0)
        return elapsed, status, out.read().count(b"\n")


def describe(times: list[float]) -> str:
    quartiles = statistics.quantiles(times, n=4)
    return (f"median {statistics.median(times) * 1000:6.1f} ms  min {min(times) * 1000:6.1f}  max {max(times) * 1000:6.1f}"
            f"  IQR {quartiles[0] * 1000:6.1f}-{quartiles[2] * 1000:6.1f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pattern", default="tcp_*")
    parser.add_argument("--repeat", type=int, default=41)
    options = parser.parse_args()
    if shutil.which("perf") is None:
        print("perf is not installed (apt-get install linux-perf)", file=sys.stderr)
        return 2
    commands = {
        "perf probe --funcs": ["perf", "probe", "--funcs", options.pattern],
        "kprobe-tui funcs": [*KPROBE_TUI, "funcs", options.pattern],
        "kprobe-tui probe -F": [*KPROBE_TUI, "probe", "-F", options.pattern],
    }
    floors = {"python -S -c pass": [sys.executable, "-S", "-c", "pass"], "python -c pass": [sys.executable, "-c", "pass"]}
    load_before = os.getloadavg()
    times: dict[str, list[float]] = {name: [] for name in [*commands, *floors]}
    lines: dict[str, int] = {}
    for name, argv in commands.items():  # one untimed run each: page cache and .pyc files warm
        _, status, lines[name] = wall(argv)
        if status != 0:
            print(f"{name}: exit status {status}: {' '.join(argv)}", file=sys.stderr)
            return 1
    for _ in range(options.repeat):
        for name, argv in [*commands.items(), *floors.items()]:
            times[name].append(wall(argv)[0])
    load_after = os.getloadavg()
    reference = statistics.median(times["perf probe --funcs"])
    print(f"pattern {options.pattern!r}, {options.repeat} rounds, the commands alternating; {os.cpu_count()} CPUs")
    for name in commands:
        ratio = statistics.median(times[name]) / reference
        print(f"{name:<22}{describe(times[name])}  {ratio:5.2f}x perf  ({lines[name]} lines)")
    for name in floors:
        print(f"floor: {name:<16}{describe(times[name])}")
    print(f"load average before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, "
          f"after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
