"""What an aggregation costs user space: kernel engine against user-space engine on a uprobe flood,
and the user-space aggregator's rate on replayed events.

1. A flood of uprobe hits (tests/live/c/aggregate.c ``flood``: work() N times) counted by comm and
   as a histogram of its argument, by every engine this kernel offers: our process's user CPU seconds
   (all threads, getrusage) per million hits, sampling once a second as ``-i 1`` does. Needs root and
   uprobes; the kernel engine needs hist triggers, so run it in a guest too:
       python tests/kernel/harness.py shell debian-6.12 -- python3 benchmarks/bench_aggregate.py
2. Replayed trace_pipe text (1M lines in the kernel's own layout, in 64 KiB blocks as the reader hands
   them over) through the aggregator's fast path, beside the general path (a LineParser Event per
   line) on the same blocks, and beside the aggregators of other git revisions (``--baseline main``, repeatable:
   each one's userspace.py loaded as it was there). Target: >= 1M events/s aggregated. Rates are per second
   of this process's CPU time, the best of a few rounds in which the fast path and the baseline take
   turns: the machine is shared, and wall time measures the others.
Usage: python benchmarks/bench_aggregate.py [--calls N] [--replay N] [--no-live] [--baseline REV]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from functools import partial
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


def replay_lines(total: int, captured: tuple[str, ...], latency: bool = False) -> list[str]:
    """Hits of work(), or entry/return pairs of nap(), as our probes print them when a run reads
    ``captured`` (of len, port, comm): a run's probes capture only what it reads."""
    rng = random.Random(7)
    comms = ["kpt-alpha", "kpt beta-2", "sshd", "nginx: worker", "python3"]
    lines = []
    for i in range(total):
        comm = comms[i % len(comms)]
        pid = 1000 + i % 13
        printed = {"len": f"len={rng.randrange(-300, 70000)}", "port": "port=13568", "comm": f'kptui_comm="{comm}"'}
        args = "".join(f" {printed[name]}" for name in captured)
        if not latency:
            lines.append(kernel_line(comm, pid, 289_000_000 + i, "work", f"(0x55663694b159){args}"))
            continue
        entry = i % 2 == 0
        site = "(0x55663694b159)" if entry else "(0x55663694b202 <- 0x55663694b159)"
        lines.append(kernel_line(comm, pid, 289_000_000 + i * 7, "nap" if entry else "nap__return",
                                 site if entry else site + args))  # latency reads its keys at the return
    return lines


def blocks(lines: list[str]) -> list[bytes]:
    data = ("\n".join(lines) + "\n").encode()
    out, start = [], 0
    while start < len(data):
        cut = data.rfind(b"\n", start, start + BLOCK) + 1 or len(data)
        out.append(data[start:cut])
        start = cut
    return out


def baseline_aggregator(revision: str):
    """``StreamAggregator`` as ``kprobe_tui/aggregate/userspace.py`` was at ``revision`` (it imports
    today's model and tally: a revision whose aggregator needs more than those cannot be loaded)."""
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{revision}:kprobe_tui/aggregate/userspace.py"],
                            check=True, capture_output=True).stdout
    spec = importlib.util.spec_from_loader(f"baseline_userspace_{revision}", loader=None)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    exec(compile(source, f"{revision}:userspace.py", "exec"), module.__dict__)
    return module.StreamAggregator, module.EventRole


def rates(makers: dict, data: list[bytes], total: int, rounds: int) -> dict[str, float]:
    """Events per CPU second of each aggregator ``makers`` makes, the best of ``rounds``; the contenders
    take turns within each round, so a neighbour's load falls on all of them alike."""
    best = dict.fromkeys(makers, float("inf"))
    for _ in range(rounds):
        for name, make in makers.items():
            aggregator = make()
            start = time.process_time()
            for block in data:
                aggregator.feed(block)
            aggregator.take()
            best[name] = min(best[name], time.process_time() - start)
    return {name: total / seconds for name, seconds in best.items()}


def bench_replay(total: int, baselines: list[str]) -> list[str]:
    work = [EventRole("work", "work")]  # hist, and count by a key: one probe
    probes = [EventRole("work", "work"), EventRole("nap", "nap")]  # count per probe tells two events apart
    arguments = {"len": "len", "port": "port", "comm": "kptui_comm"}
    latency = [EventRole("nap", "nap", "entry"), EventRole("nap__return", "nap", "return")]
    cases = [
        ("count per probe", Aggregation("count", keys=(Field("probe"),)), probes, ()),
        ("count by comm", Aggregation("count", keys=(Field("comm"),)), work, ("comm",)),
        ("count by pid", Aggregation("count", keys=(Field("pid"),)), work, ()),
        ("count by ntohs(port)", Aggregation("count", keys=(Field("port", "ntohs"),)), work, ("port",)),
        ("hist of len", Aggregation("hist", value=Field("len")), work, ("len",)),
        ("hist of len by comm", Aggregation("hist", keys=(Field("comm"),), value=Field("len")), work, ("len", "comm")),
        ("latency", Aggregation("latency"), latency, ()),
        ("latency by comm", Aggregation("latency", keys=(Field("comm"),)), latency, ("comm",)),
    ]
    olds = {revision: baseline_aggregator(revision) for revision in baselines}
    lines = [say(f"2. replayed events ({total:,} lines in {BLOCK // 1024} KiB blocks), events per CPU second "
                 "aggregated (feed + take), best of 5 (general: of 2); target >= 1,000,000"),
             say(f"   {'':<22} {'fast path':>12} {'general path':>13}"
                 + "".join(f" {revision + ' fast':>14}" for revision in olds) + "   (general: an Event per line)")]
    for name, model, roles, captured in cases:
        data = blocks(replay_lines(total, captured, latency=model.kind == "latency"))
        makers = {"fast": partial(StreamAggregator, model, roles, arguments, fast=True)}
        for revision, (old_class, old_role) in olds.items():
            old_roles = [old_role(role.event, role.label, role.role) for role in roles]
            makers[revision] = partial(old_class, model, old_roles, arguments, fast=True)
        measured = rates(makers, data, total, 5)
        fast = measured["fast"]
        general = rates({"general": partial(StreamAggregator, model, roles, arguments, fast=False)}, data, total, 2)
        row = f"   {name:<22} {fast:>12,.0f} {general['general']:>13,.0f}"
        row += "".join(f" {measured[revision]:>14,.0f}" for revision in olds)
        row += "".join(f"   = {fast / measured[revision]:.2f} x {revision}" for revision in olds)
        lines.append(say(row + f"   ({'ok' if fast >= 1_000_000 else 'BELOW TARGET'})"))
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300_000, help="hits of the live flood")
    parser.add_argument("--replay", type=int, default=1_000_000, help="lines replayed")
    parser.add_argument("--no-live", action="store_true", help="only the replay (no root needed)")
    parser.add_argument("--baseline", metavar="REV", action="append", default=[],
                        help="also replay through the aggregator of this git revision (repeatable)")
    args = parser.parse_args()
    if not args.no_live:
        if os.geteuid() != 0 or not Path("/sys/kernel/tracing/uprobe_events").exists():
            say("1. live flood: skipped (needs root and uprobes)")
        else:
            bench_flood(args.calls)
    bench_replay(args.replay, args.baseline)
    return 0


if __name__ == "__main__":
    sys.exit(main())
