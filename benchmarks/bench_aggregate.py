"""What an aggregation costs user space: kernel engine against user-space engine on a uprobe flood,
and the user-space aggregator's rate on replayed events.

1. A flood of uprobe hits (tests/live/c/aggregate.c ``flood``: work() N times) counted by comm and
   as a histogram of its argument, by every engine this kernel offers: our process's user CPU seconds
   (all threads, getrusage) per million hits, sampling once a second as ``-i 1`` does. Needs root and
   uprobes; the kernel engine needs hist triggers, so run it in a guest too:
       python tests/kernel/harness.py shell debian-6.12 -- python3 benchmarks/bench_aggregate.py
2. Replayed trace_pipe text (1M lines in the kernel's own layout, in 64 KiB blocks as the reader hands
   them over) through the aggregator's fast path, beside the general path (a LineParser Event per
   line) on the same blocks. Target: >= 1M events/s aggregated.
Usage: python benchmarks/bench_aggregate.py [--calls N] [--replay N] [--no-live]
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kprobe_tui.aggregate.model import Aggregation, Field  # noqa: E402
from kprobe_tui.aggregate.userspace import EventRole, StreamAggregator  # noqa: E402

BLOCK = 64 * 1024


def user_cpu() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_utime


# -- 1. live flood -----------------------------------------------------------------------------------


def say(line: str) -> str:
    """Print a line as soon as it is measured (a guest run takes minutes), and keep it."""
    print(line, flush=True)
    return line


def bench_flood(calls: int) -> list[str]:
    from kprobe_tui.aggregate.offer import detect
    from kprobe_tui.aggregate.run import AggregationRun
    from kprobe_tui.aggregate.targets import TargetBuilder
    from kprobe_tui.kernel import lifetime
    from kprobe_tui.kernel.sources import locate

    kernel = locate()
    top = kernel.tracing()
    binary = Path(tempfile.mkdtemp(prefix="kpt-bench-")) / "kpt_aggregate_bench"
    subprocess.run(["gcc", "-g", "-O1", "-o", str(binary), str(ROOT / "tests/live/c/aggregate.c")], check=True)
    offer = detect(top)
    questions = [("count by comm", Aggregation("count", keys=(Field("comm"),)), "count"),
                 ("hist of len", Aggregation("hist", value=Field("len")), "hist"),
                 ("count per probe", Aggregation("count", keys=(Field("probe"),)), "count")]
    lines = [say(f"1. uprobe flood: work() called {calls:,} times; our user CPU (all threads) per million hits"),
             say(f"   kernel: {os.uname().release}; hist triggers: {'yes' if offer.hist_triggers else 'no'}")]
    for name, model, kind in questions:
        for engine in ("kernel", "user"):
            builder = TargetBuilder(kernel, top.read("README"), lifetime.run_name(), binary=str(binary))
            targets = builder.counting(["work"], model, "") if kind == "count" else builder.histogram("work", "len", model, "")
            run = AggregationRun(top, model, targets, "", engine, offer)
            try:
                choice = run.start()
            except Exception as exc:  # this kernel cannot: say so and go on
                lines.append(say(f"   {name:<16} {engine:<6} -- {getattr(exc, 'message', exc)}"))
                continue
            before, started = user_cpu(), time.perf_counter()
            flood = subprocess.Popen([str(binary), "flood", str(calls)], stdout=subprocess.DEVNULL)
            samples = 1
            while flood.poll() is None:
                time.sleep(1.0)
                run.sample()
                samples += 1
            final = run.stop()
            spent, wall = user_cpu() - before, time.perf_counter() - started
            hits = final.total.count
            lost = final.total.lost
            per_million = spent / hits * 1e6 if hits else float("nan")
            lines.append(say(f"   {name:<16} {engine:<6} ({choice.method:<7}) {hits:>9,} hits {lost:>7,} lost  "
                             f"user CPU {spent:6.2f} s = {per_million:7.3f} s per 1M hits, {spent / samples * 1000:6.1f} ms "
                             f"per sample x {samples}   ({hits / wall:>7,.0f} hits/s)"))
    return lines


# -- 2. replay ----------------------------------------------------------------------------------------


def kernel_line(comm: str, pid: int, micros: int, event: str, body: str) -> str:
    """trace_output.c's layout: "%16s-%-7d", "[%03d]", flags, "%5lu.%06lu"."""
    return f"{comm:>16}-{pid:<7d} [{pid % 2:03d}] ..... {micros // 1_000_000:5d}.{micros % 1_000_000:06d}: {event}: {body}"


def replay_lines(total: int) -> tuple[list[str], list[str]]:
    """Hits of work() (len, port, comm captured) and entry/return pairs of nap(), as our probes print them."""
    rng = random.Random(7)
    comms = ["kpt-alpha", "kpt beta-2", "sshd", "nginx: worker", "python3"]
    hits, pairs = [], []
    for i in range(total):
        comm = comms[i % len(comms)]
        pid = 1000 + i % 13
        hits.append(kernel_line(comm, pid, 289_000_000 + i, "work",
                                f'(0x55663694b159) len={rng.randrange(-300, 70000)} port=13568 kptui_comm="{comm}"'))
        entry = i % 2 == 0
        site = "(0x55663694b159)" if entry else "(0x55663694b202 <- 0x55663694b159)"
        pairs.append(kernel_line(comm, pid, 289_000_000 + i * 7, "nap" if entry else "nap__return",
                                 f'{site} kptui_comm="{comm}"'))  # by comm, both probes capture it
    return hits, pairs


def blocks(lines: list[str]) -> list[bytes]:
    data = ("\n".join(lines) + "\n").encode()
    out, start = [], 0
    while start < len(data):
        cut = data.rfind(b"\n", start, start + BLOCK) + 1 or len(data)
        out.append(data[start:cut])
        start = cut
    return out


def bench_replay(total: int) -> list[str]:
    hits, pairs = replay_lines(total)
    work = [EventRole("work", "work")]  # hist, and count by a key: one probe
    probes = [EventRole("work", "work"), EventRole("nap", "nap")]  # count per probe tells two events apart
    arguments = {"len": "len", "port": "port", "comm": "kptui_comm"}
    latency = [EventRole("nap", "nap", "entry"), EventRole("nap__return", "nap", "return")]
    cases = [
        ("count per probe", Aggregation("count", keys=(Field("probe"),)), probes, hits),
        ("count by comm", Aggregation("count", keys=(Field("comm"),)), work, hits),
        ("count by pid", Aggregation("count", keys=(Field("pid"),)), work, hits),
        ("count by ntohs(port)", Aggregation("count", keys=(Field("port", "ntohs"),)), work, hits),
        ("hist of len", Aggregation("hist", value=Field("len")), work, hits),
        ("hist of len by comm", Aggregation("hist", keys=(Field("comm"),), value=Field("len")), work, hits),
        ("latency", Aggregation("latency"), latency, pairs),
        ("latency by comm", Aggregation("latency", keys=(Field("comm"),)), latency, pairs),
    ]
    lines = [say(f"2. replayed events ({total:,} lines in {BLOCK // 1024} KiB blocks, best of 3), events/s aggregated "
                 "(feed + take); target >= 1,000,000"),
             say(f"   {'':<22} {'fast path':>14} {'general path':>14} (an Event per line: the reference)")]
    for name, model, roles, text in cases:
        rates = []
        data = blocks(text)
        for fast in (True, False):
            best = float("inf")
            for _ in range(3):  # the best of three: the machine is shared
                aggregator = StreamAggregator(model, roles, arguments, fast=fast)
                start = time.perf_counter()
                for block in data:
                    aggregator.feed(block)
                aggregator.take()
                best = min(best, time.perf_counter() - start)
            rates.append(total / best)
        lines.append(say(f"   {name:<22} {rates[0]:>14,.0f} {rates[1]:>14,.0f}   = {rates[0] / rates[1]:.1f} x"))
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300_000, help="hits of the live flood")
    parser.add_argument("--replay", type=int, default=1_000_000, help="lines replayed")
    parser.add_argument("--no-live", action="store_true", help="only the replay (no root needed)")
    args = parser.parse_args()
    if not args.no_live:
        if os.geteuid() != 0 or not Path("/sys/kernel/tracing/uprobe_events").exists():
            say("1. live flood: skipped (needs root and uprobes)")
        else:
            bench_flood(args.calls)
    bench_replay(args.replay)
    return 0


if __name__ == "__main__":
    sys.exit(main())
