"""Benchmark: `kprobe-tui funcs PATTERN` and `kprobe-tui probe -F PATTERN` against `perf probe --funcs PATTERN`.

Issue 12 item 4: both take at most the wall time of perf's --funcs on the same machine (1.34x before).
Each round runs the three commands once, in turn (so load on a shared machine falls on all of them
alike), as fresh processes with their output to a file; after --repeat rounds it prints each one's
median, spread (min-max and the interquartile range) and its ratio to perf's median, then the load
average before and after. Also prints what every fresh Python process pays before our code runs.

The same is done for a program (``funcs -x BIN`` and ``probe -x BIN -F`` beside ``perf probe -x BIN -F``)
on one compiled here with --program-functions functions (a .symtab of its own, so perf and kprobe-tui
read the same symbols), or on --binary.

    python benchmarks/bench_funcs.py [--pattern 'tcp_*'] [--repeat 41] [--binary BIN | --program-functions N]
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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


def program(directory: str, functions: int) -> str:
    """A program of ``functions`` small functions, built with debug info: what a lab's -x names."""
    source = os.path.join(directory, "many.c")
    with open(source, "w") as out:
        out.writelines(f"__attribute__((noinline)) int work_{n}(int x) {{ return x * {n} + 1; }}\n" for n in range(functions))
        out.write("int main(int argc, char **argv) { return work_0(argc); }\n")
    binary = os.path.join(directory, "many")
    subprocess.run(["gcc", "-g", "-O1", "-o", binary, source], check=True)
    return binary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pattern", default="tcp_*")
    parser.add_argument("--repeat", type=int, default=41)
    parser.add_argument("--binary", help="the program for the -x rows (default: one compiled here)")
    parser.add_argument("--program-functions", type=int, default=3000)
    options = parser.parse_args()
    if shutil.which("perf") is None:
        print("perf is not installed (apt-get install linux-perf)", file=sys.stderr)
        return 2
    # As installed (pip byte-compiles): .pyc files for the project too, which PYTHONDONTWRITEBYTECODE=1
    # in a shell would otherwise leave unwritten, every run then compiling ~100 modules (0.14 s measured).
    compileall.compile_dir(Path(__file__).resolve().parents[1] / "kprobe_tui", quiet=1)
    with tempfile.TemporaryDirectory() as directory:
        binary = options.binary or program(directory, options.program_functions)
        status = 0
        for title, commands in (
            (f"kernel, pattern {options.pattern!r}", {
                "perf probe --funcs": ["perf", "probe", "--funcs", options.pattern],
                "kprobe-tui funcs": [*KPROBE_TUI, "funcs", options.pattern],
                "kprobe-tui probe -F": [*KPROBE_TUI, "probe", "-F", options.pattern],
            }),
            (f"program {binary}", {
                "perf probe -x -F": ["perf", "probe", "-x", binary, "-F"],
                "kprobe-tui funcs -x": [*KPROBE_TUI, "funcs", "-x", binary],
                "kprobe-tui probe -x -F": [*KPROBE_TUI, "probe", "-x", binary, "-F"],
            }),
        ):
            status = status or measure(title, commands, options.repeat)
        return status


def measure(title: str, commands: dict[str, list[str]], repeat: int) -> int:
    """Time each command ``repeat`` times, in turn, and print the figures, perf's (the first) as the reference."""
    floors = {"python -S -c pass": [sys.executable, "-S", "-c", "pass"], "python -c pass": [sys.executable, "-c", "pass"]}
    load_before = os.getloadavg()
    times: dict[str, list[float]] = {name: [] for name in [*commands, *floors]}
    lines: dict[str, int] = {}
    for name, argv in commands.items():  # one untimed run each: page cache and .pyc files warm
        _, status, lines[name] = wall(argv)
        if status != 0:
            print(f"{name}: exit status {status}: {' '.join(argv)}", file=sys.stderr)
            return 1
    for _ in range(repeat):
        for name, argv in [*commands.items(), *floors.items()]:
            times[name].append(wall(argv)[0])
    load_after = os.getloadavg()
    reference = statistics.median(times[next(iter(commands))])
    print(f"{title}: {repeat} rounds, the commands alternating; {os.cpu_count()} CPUs")
    for name in commands:
        ratio = statistics.median(times[name]) / reference
        print(f"{name:<24}{describe(times[name])}  {ratio:5.2f}x perf  ({lines[name]} lines)")
    for name in floors:
        print(f"floor: {name:<17}{describe(times[name])}")
    print(f"load average before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, "
          f"after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
