"""What counting stacks will cost, said before it starts (issue 28, safe by default).

A stack costs every hit a walk of the stack (and, in user space, a parse of its text), so a hot function's
stacks can take a CPU. Before a stack count starts, its probes' hits are counted for half a second by the
cheapest count the kernel offers (``AggregationRun`` with no key: the kprobe_profile/uprobe_profile hit
counters, which cost nothing more; with a filter a BPF program or a hist trigger keyed by nothing; else
the events the user-space engine reads), and the rate times what a hit costs the engine that will count
the stacks is the estimate. The probes of that count are removed before the stack count makes its own.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from kprobe_tui.aggregate.model import Aggregation
from kprobe_tui.aggregate.run import AggregationRun
from kprobe_tui.aggregate.stackrun import StackRun

MEASURE_SECONDS = 0.5  # long enough for a rate of 10 hits/s to show, short enough not to be noticed
# CPU seconds a hit costs, from benchmarks/bench_stacks.py. User space (a uprobe flood on this machine,
# --uprobe): our process 22.4-24.3 us and the traced program 14.4-14.8 us more a hit (the kernel walks and
# prints its user stack), ~37 us in all. The kernel engine (vfs_read from dd, 6.1 guest): the traced program
# 10.3-11.4 us more a hit and ours 0.2-1.9 s per million hits (mostly per sample, not per hit), under
# emulation where a bare read() took 3.76 us against 0.61 us on this machine (6.2x): ~2 us a hit here.
USER_SECONDS_PER_HIT = 37e-6
KERNEL_SECONDS_PER_HIT = 2e-6
# The user-space engine kept up with ~26,000 hits/s (bench_stacks --uprobe: 26,105-27,066 hits/s read, and
# 11% of 200k hits lost at 26,105/s): beyond that, hits are lost.
USER_KEEPS_UP = 26_000
# Ask before a run estimated at more than a quarter of a CPU: for the user-space engine that is ~6,700
# hits/s, a quarter of the rate at which it starts to lose hits, and the traced threads are slowed by as much.
CONFIRM_ABOVE = 0.25


@dataclass(frozen=True)
class StackCost:
    """The measured hit rate and what counting those hits' stacks costs: a fraction of one CPU."""

    what: str  # the probes, as the user named them
    hits_per_second: float
    engine: str  # "kernel" or "user": where the stacks will be counted
    seconds_per_hit: float

    @property
    def cpu(self) -> float:
        return self.hits_per_second * self.seconds_per_hit

    @property
    def high(self) -> bool:
        return self.cpu > CONFIRM_ABOVE

    def line(self) -> str:
        """One line a person reads: the rate, the share of a CPU, and the per-hit figure it comes from."""
        where = "in the kernel" if self.engine == "kernel" else "in user space"
        share = f"~{self.cpu:.1f} CPUs" if self.cpu >= 1 else ("<1% of a CPU" if self.cpu < 0.01 else f"~{self.cpu:.0%} of a CPU")
        text = (f"{self.what}: ~{self.hits_per_second:,.0f} hits/s; counting its stacks {where} costs {share} "
                f"({self._per_hit()})")
        if self.engine == "user" and self.hits_per_second > USER_KEEPS_UP:
            text += f"; above ~{USER_KEEPS_UP:,} hits/s user space loses hits"
        return text

    def _per_hit(self) -> str:
        """Where the figure comes from: the user-space one was measured on a machine, the kernel's in a guest
        under emulation and scaled (no machine of ours has kprobes and hist triggers natively)."""
        figure = f"{self.seconds_per_hit * 1e6:g} us a hit"
        return f"measured {figure}" if self.engine == "user" else f"~{figure}, an emulated guest's figure scaled"


def stack_engine(run: StackRun) -> str:
    """Where ``run`` will count its stacks: as ``StackRun._choose`` decides, before it makes any probe."""
    if run.targets.uprobes or run.requested == "user" or not run.offer.hist_triggers:
        return "user"
    if run.histogram is not None and run.histogram.kind == "latency" and run.offer.missing_for(run.histogram):
        return "user"  # each entry's stack kept in user space until its return
    return "kernel"


def hit_rate(run: StackRun, seconds: float = MEASURE_SECONDS) -> float:
    """Hits per second of ``run``'s probes (its filter applied), by a plain count of its own; nothing of
    that count is left in the kernel when this returns, whatever happens."""
    count = AggregationRun(run.top, Aggregation("count"), run.targets, run.filter_text, offer=run.offer)
    count.start()
    try:
        time.sleep(seconds)
        final = count.stop()
    finally:
        count.stop()
    return final.total.count / final.total.seconds if final is not None and final.total.seconds > 0 else 0.0


def estimate(run: StackRun, what: str, seconds: float = MEASURE_SECONDS) -> StackCost:
    engine = stack_engine(run)
    return StackCost(what, hit_rate(run, seconds), engine,
                     KERNEL_SECONDS_PER_HIT if engine == "kernel" else USER_SECONDS_PER_HIT)
