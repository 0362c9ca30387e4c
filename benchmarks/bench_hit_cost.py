"""What each hit of a probe costs the traced program: our engines beside bpftrace's one-liners.

A hot loop of one-byte reads of /dev/zero (a C program compiled at run time) runs bare, then under
each tracer attached to ``vfs_read``; a tracer's price is the time it adds to each read. The guests
share a loaded host with QEMU in software emulation, whose speed swings 5x from one second to the next,
so a read is timed beside a twin that no tracer sees: the loop alternates blocks of 500 ``read()``s
(vfs_read) with 500 ``readv()``s (vfs_readv), and keeps the fastest block of each (a quiet moment for
both). The price is ``(read - readv)`` traced minus ``(read - readv)`` bare, the best of ``--rounds``.
Each question is asked of bpftrace's one-liner and of our engines (``x bpftrace``: ours over its);
a tracer's own count of hits is printed beside its price, so a tracer that missed the loop shows.

Run in a guest (kprobes, bpftrace and hist triggers are there; this machine has none of them):

    python tests/kernel/harness.py shell debian-6.1 -- python3 benchmarks/bench_hit_cost.py
    python tests/kernel/harness.py shell debian-6.12 -- python3 benchmarks/bench_hit_cost.py

``--only latency`` (repeatable) asks one question, ``--engine bpf`` (or hist, user) runs one of ours, ``--baseline DIR``
adds the kernel engine of another revision (``git archive REV | tar -x -C DIR``) in the same rounds; ``--blocks N``
(200) blocks of 500 calls per loop, ``--rounds R`` (3) loops per tracer. Nanoseconds are an
emulator's (TCG): compare the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOOP_COMM = "kpt-hitloop"
BLOCK = 500  # calls per block: the loop's own
READY = "kpt-hitcost-ready"
LOOP_SOURCE = r"""
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define BLOCK %(block)d

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

/* BLOCKS blocks of BLOCK one-byte read()s (vfs_read: probed), each followed by BLOCK readv()s (vfs_readv:
   not probed); prints the fastest block of each, in ns per call. */
int main(int argc, char **argv)
{
    long blocks = argc > 1 ? atol(argv[1]) : 200, size = BLOCK;
    char byte;
    struct iovec one = {&byte, 1};
    double best_read = 1e300, best_readv = 1e300;
    int fd = open("/dev/zero", O_RDONLY);
    if (fd < 0)
        return 1;
    prctl(PR_SET_NAME, "%(comm)s");
    for (long b = 0; b < blocks; b++) {
        double start = now();
        for (long i = 0; i < size; i++)
            if (read(fd, &byte, 1) != 1)
                return 1;
        double middle = now();
        for (long i = 0; i < size; i++)
            if (readv(fd, &one, 1) != 1)
                return 1;
        double end = now();
        if (middle - start < best_read)
            best_read = middle - start;
        if (end - middle < best_readv)
            best_readv = end - middle;
    }
    printf("%%.1f %%.1f\n", best_read / size, best_readv / size);
    return 0;
}
"""

BPFTRACE_LATENCY = ("kprobe:vfs_read { @start[tid] = nsecs; } "
                    "kretprobe:vfs_read /@start[tid]/ { @us = hist((nsecs - @start[tid]) / 1000); delete(@start[tid]); } "
                    "END { clear(@start); }")  # the threads in a read at the end: not part of the answer
# question -> (bpftrace's one-liner, our command's arguments)
QUESTIONS = {
    "latency": (BPFTRACE_LATENCY, ["latency", "vfs_read"]),
    "count": ("kprobe:vfs_read { @[probe] = count(); }", ["count", "vfs_read"]),
    "count by comm": ("kprobe:vfs_read { @[comm] = count(); }", ["count", "vfs_read", "--by", "comm"]),
    "hist of count": ("kprobe:vfs_read { @ = hist(arg2); }", ["hist", "vfs_read", "count"]),
}
ENGINES = ("bpf", "hist", "user")  # our BPF programs, hist triggers, our trace instance read here


def build(directory: Path) -> Path:
    source = directory / "hitloop.c"
    source.write_text(LOOP_SOURCE % {"comm": LOOP_COMM, "block": BLOCK})
    binary = directory / "hitloop"
    subprocess.run(["gcc", "-O2", "-o", str(binary), str(source)], check=True)
    return binary


def loop_gap(binary: Path, blocks: int) -> float:
    """One run of the loop: ns a read() takes above a readv(), each its fastest block."""
    read, readv = map(float, subprocess.run([str(binary), str(blocks)], check=True, capture_output=True,
                                            text=True).stdout.split())
    return read - readv


@dataclass
class Tracer:
    """A tracer in a child process: started, ready once attached, stopped with SIGINT for its answer."""

    name: str
    argv: list[str]
    ready_text: str  # in its output once its probes are in place
    ready_stream: str  # stdout or stderr
    cwd: Path = ROOT  # python -m kprobe_tui imports the package found here first
    proc: subprocess.Popen | None = None

    def start(self, limit: float = 600) -> None:
        self.proc = subprocess.Popen(self.argv, cwd=self.cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
        stream = self.proc.stdout if self.ready_stream == "stdout" else self.proc.stderr
        assert stream is not None
        deadline = time.monotonic() + limit
        seen = []
        while time.monotonic() < deadline:
            line = stream.readline()
            if not line:
                raise RuntimeError(f"{self.name} exited {self.proc.wait()} before it was ready: {seen}")
            seen.append(line.rstrip())
            if self.ready_text in line:
                return
        raise RuntimeError(f"{self.name} was not ready in {limit} s: {seen}")

    def stop(self) -> str:
        """SIGINT (its clean stop) and everything it printed after being ready."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGINT)
        try:
            out, err = self.proc.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            out, err = self.proc.communicate()
        return out + err


def bpftrace(question: str) -> Tracer:
    """``Attaching N probes...`` comes before the probes are: BEGIN fires once they are all in place."""
    program, _ = QUESTIONS[question]
    return Tracer("bpftrace", ["bpftrace", "-e", f'BEGIN {{ printf("{READY}\\n"); }} {program}'], READY, "stdout")


def ours(question: str, engine: str, root: Path = ROOT, label: str = "kprobe-tui") -> Tracer:
    """Our command, run from ``root`` (this checkout, or another revision's for ``--baseline``)."""
    _, args = QUESTIONS[question]
    return Tracer(f"{label} {engine}", [sys.executable, "-m", "kprobe_tui", *args, "--engine", engine, "--json"],
                  " engine: ", "stderr", root)


def hits_seen(answer: str) -> int:
    """The hits a tracer counted: our final JSON object's count, or the sum of bpftrace's map lines
    (``@[comm]: N``) and histogram rows (``[4, 8)   N |@@@|``)."""
    records = [json.loads(line) for line in answer.splitlines() if line.startswith("{")]
    if records:
        return records[-1]["count"]
    rows = re.findall(r"^(?:@.*: (\d+)|\[[^\]\n]*[\])] +(\d+) \|.*)$", answer, re.MULTILINE)
    return sum(int(mapped or bucket) for mapped, bucket in rows)


def measure(binary: Path, tracer: Tracer, blocks: int, rounds: int) -> tuple[float, float, int]:
    """(bare gap, traced gap, the tracer's hit count): each gap the best of ``rounds`` loops."""
    bare = min(loop_gap(binary, blocks) for _ in range(rounds))
    tracer.start()
    try:
        traced = min(loop_gap(binary, blocks) for _ in range(rounds))
    finally:
        answer = tracer.stop()
    return bare, traced, hits_seen(answer)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--blocks", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", action="append", choices=sorted(QUESTIONS))
    parser.add_argument("--engine", action="append", choices=ENGINES, help="ours to run (default: all three)")
    parser.add_argument("--baseline", type=Path, metavar="DIR",
                        help="another revision's tree (git archive REV | tar -x -C DIR): its kernel engine runs beside ours")
    args = parser.parse_args(argv)
    binary = build(Path(tempfile.mkdtemp(prefix="kpt-hitcost-")))
    reads = args.blocks * BLOCK
    print(f"kernel {os.uname().release}; {reads:,} one-byte read()s and readv()s of /dev/zero per loop, best of "
          f"{args.rounds} loops; ns a read() takes above a readv(), bare and traced; cost: the difference", flush=True)
    print(f"{'question':<14} {'tracer':<18} {'bare':>8} {'traced':>9} {'cost':>8} {'x bpftrace':>10} {'hits':>9}",
          flush=True)
    for question in args.only or QUESTIONS:
        reference = None
        tracers = [bpftrace(question)] + [ours(question, engine) for engine in args.engine or ENGINES]
        if args.baseline:
            tracers.append(ours(question, "kernel", args.baseline.resolve(), "baseline"))
        for tracer in tracers:
            try:
                bare, traced, hits = measure(binary, tracer, args.blocks, args.rounds)
            except RuntimeError as exc:
                print(f"{question:<14} {tracer.name:<18} -- {exc}", flush=True)
                continue
            cost = traced - bare
            reference = cost if reference is None else reference
            ratio = f"{cost / reference:.2f}" if reference and reference > 0 else "-"
            print(f"{question:<14} {tracer.name:<18} {bare:>8.0f} {traced:>9.0f} {cost:>8.0f} {ratio:>10} {hits:>9}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
