"""What the running kernel offers for aggregation, and which engine a run uses, with the reason.

Read from what the kernel says about itself (tracefs README and files), never from the version:
hist triggers (``CONFIG_HIST_TRIGGERS``, >= 4.7) are in README's trigger list; synthetic events
(>= 4.17) have ``synthetic_events``; numeric constants in hist expressions (>= 5.16), which the
latency triggers need for ``lat+1``, have README's ``numeric_literal``; ``kprobe_profile`` and
``uprobe_profile`` count hits of every probe with no event at all.

The BPF engine (``bpf_engine``) is preferred where it can say the question: it costs the traced
system what bpftrace's program does, a hist trigger about 2.3x that (benchmarks/bench_hit_cost.py).

Latency keyed by comm needs no ``common_pid.execname`` passed into the synthetic event (>= 5.15):
the synthetic event is generated on the returning thread, so its own ``common_pid.execname`` is
the caller's comm, on any kernel with synthetic events.
"""

from __future__ import annotations

from dataclasses import dataclass

from kprobe_tui.aggregate.model import STACK_KEY, Aggregation
from kprobe_tui.errors import UserError
from kprobe_tui.kernel.tracefs import Tracefs

ENGINES = ("auto", "kernel", "bpf", "hist", "user")


@dataclass(frozen=True)
class KernelOffer:
    hist_triggers: bool
    synthetic_events: bool
    hist_constants: bool
    kprobe_profile: bool
    uprobe_profile: bool
    synthetic_stacks: bool = False  # a synthetic event takes a stack field (6.4+): a latency keyed by stack

    def missing_for(self, aggregation: Aggregation) -> str | None:
        """Why hist triggers cannot run this aggregation here, or None when they can."""
        if not self.hist_triggers:
            return ("this kernel has no hist triggers (its tracefs README lists none: CONFIG_HIST_TRIGGERS is off)")
        if aggregation.kind == "latency":
            if not self.synthetic_events:
                return "this kernel has no synthetic events (no tracefs synthetic_events: CONFIG_SYNTH_EVENTS, >= 4.17)"
            if not self.hist_constants:
                return ("this kernel's hist triggers take no numeric constants (its README has no numeric_literal: "
                        "kernels before 5.16), which the latency buckets need")
            names = {key.name for key in aggregation.keys}
            if STACK_KEY in names and not self.synthetic_stacks:
                return ("this kernel's synthetic events take no stack (its README has no `long[] stack`: kernels "
                        "before 6.4), which a latency keyed by the entry's stack needs")
            if STACK_KEY in names and "comm" in names:  # the 6.12 guest refused it: EINVAL
                return ("a kernel table key holds at most 384 bytes (HIST_KEY_SIZE_MAX), and a stack (128), a comm "
                        "(256) and a latency bucket are more")
        return None


def detect(top: Tracefs) -> KernelOffer:
    readme = top.read("README") if top.exists("README") else ""
    return KernelOffer(
        hist_triggers="hist trigger" in readme or "hist:keys=" in readme,
        synthetic_events=top.exists("synthetic_events"),
        hist_constants="numeric_literal" in readme,
        kprobe_profile=top.exists("kprobe_profile"),
        uprobe_profile=top.exists("uprobe_profile"),
        synthetic_stacks="long[] stack" in readme,
    )


@dataclass(frozen=True)
class Choice:
    engine: str  # "kernel" or "user"
    method: str  # "bpf" (our programs), "hist" (hist triggers), "profile" (kprobe_profile/uprobe_profile), "stream"
    reason: str


def choose(requested: str, aggregation: Aggregation, offer: KernelOffer, *, profile_only: bool, uprobes: bool,
           filter_refusal: str | None, bpf_refusal: str | None = "") -> Choice:
    """The engine for a run: the kernel's whenever it can say the whole question (the profile files, else our
    BPF programs, else hist triggers), else user space.

    ``profile_only``: plain hit counts per probe with no filter, which the profile files answer.
    ``filter_refusal``: why the kernel's filter language cannot say the filter (None: it can).
    ``bpf_refusal``: why the BPF engine cannot run this question (None: it can; "": not one it answers).
    """
    if requested not in ENGINES:
        raise UserError(f"--engine {requested}: one of {', '.join(ENGINES)}")
    if requested == "user":
        return Choice("user", "stream", "asked for (--engine user): events are read from our trace instance "
                                        "and aggregated here")
    profile = "uprobe_profile" if uprobes else "kprobe_profile"
    if requested in ("auto", "kernel") and profile_only and getattr(offer, profile):
        return Choice("kernel", "profile", f"{profile} counts every hit in the kernel: no event is recorded "
                                           "or copied (hits of kprobe-tui itself are counted too)")
    if requested == "bpf" and bpf_refusal is not None:
        raise UserError(f"--engine bpf: {bpf_refusal or 'not a question the BPF engine answers'}",
                        "use --engine hist, user or auto")
    if requested in ("auto", "kernel", "bpf") and bpf_refusal is None:
        return Choice("kernel", "bpf", "a BPF program of ours on each probe counts its hits in the kernel: no event "
                                       "is recorded and no trigger runs; user space reads the map once per interval")
    missing = offer.missing_for(aggregation)
    if missing is None and filter_refusal:
        missing = f"the kernel cannot apply the filter ({filter_refusal})"
    if missing is None:
        what = ("hist triggers and a synthetic event" if aggregation.kind == "latency" else "hist triggers")
        return Choice("kernel", "hist", f"{what} aggregate in the kernel; user space reads each hist file "
                                        "once per interval" + (f" ({bpf_refusal})" if bpf_refusal and requested != "hist" else ""))
    if requested in ("kernel", "hist"):
        raise UserError(f"--engine {requested}: {missing}" + (f"; and {bpf_refusal}" if bpf_refusal and requested == "kernel" else ""),
                        "use --engine user (or auto)")
    return Choice("user", "stream", f"{missing}" + (f" and {bpf_refusal}" if bpf_refusal else "")
                  + ": events are read from our trace instance and aggregated here")
