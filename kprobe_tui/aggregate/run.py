"""One running aggregation, whichever engine runs it: ``start()``, ``sample()``, ``stop()``.

``sample()`` returns what happened since the previous sample and since the start, as immutable
``Result``s, and the hit rate (for a sparkline). It costs one read of each hist file (kernel
engine) or one swap of the aggregator's counters (user-space engine), so a view may call it once
a second from a worker thread; it holds a lock, so ``stop()`` from another thread waits for it.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from kprobe_tui.aggregate import bpf_engine
from kprobe_tui.aggregate.bpf_engine import BpfEngine
from kprobe_tui.aggregate.kernel_engine import KernelHistEngine, ProfileEngine
from kprobe_tui.aggregate.model import Aggregation
from kprobe_tui.aggregate.offer import Choice, KernelOffer, choose, detect
from kprobe_tui.aggregate.result import Result, summarize
from kprobe_tui.aggregate.tally import Tally
from kprobe_tui.aggregate.targets import Targets
from kprobe_tui.aggregate.user_engine import StudentEngine, UserEngine
from kprobe_tui.errors import UserError
from kprobe_tui.kernel import access
from kprobe_tui.kernel.bpf import BpfError
from kprobe_tui.kernel.events import DynamicEvent, Events
from kprobe_tui.kernel.profile import read_hits
from kprobe_tui.kernel.tracefs import KernelRefused, Tracefs
from kprobe_tui.stream import filterexpr

RATE_HISTORY = 300  # samples of the hit rate kept for a sparkline


@dataclass(frozen=True)
class Sample:
    interval: Result  # since the previous sample
    total: Result  # since the start

    @property
    def rate(self) -> float:
        """Hits per second in the interval."""
        return self.interval.count / self.interval.seconds if self.interval.seconds > 0 else 0.0


Engine = BpfEngine | KernelHistEngine | ProfileEngine | UserEngine | StudentEngine


class RunEngine(Protocol):
    name: str

    def start(self) -> None: ...

    def stop(self) -> None: ...


EngineT = TypeVar("EngineT", bound=RunEngine)


class ProbeRun(Generic[EngineT]):
    """The probes of a run and the engine chosen for it: made by ``start()``, removed by ``_remove_probes()``.

    What a count table and a stack count share; each says how it chooses (``_choose``) and what it runs (``_engine``)."""

    def __init__(self, top: Tracefs, targets: Targets, filter_text: str = "", engine: str = "auto",
                 offer: KernelOffer | None = None, existing: bool = False) -> None:
        """``existing``: the targets are events that exist already (``user_engine.existing_targets``): none is
        made or deleted, and a user without a trace instance counts them through perf_event_open."""
        if filter_text:
            filterexpr.parse(filter_text)  # a bad filter fails before anything is made
        self.top = top
        self.targets = targets
        self.filter_text = filter_text
        self.requested = engine
        self.existing = existing
        self.offer = offer or detect(top)
        self.choice: Choice | None = None
        self.engine: EngineT | None = None
        self._events = Events(top)
        self._created: list[DynamicEvent] = []
        self._kernel_filters: dict[str, str] = {}  # event -> the part of the filter its trigger applies
        self._bpf_refused = ""  # why the kernel would not run our BPF programs, once it has refused them
        self._started = self._last = 0.0
        self._lock = threading.Lock()
        self._running = False

    # -- starting ----------------------------------------------------------------------------------

    def start(self) -> Choice:
        """Create the probes, choose the engine (saying why) and start it; on failure nothing is left."""
        try:
            if not self.existing:
                self._create_probes()
            self.choice = self._choose()
            self._start_engine()
        except BaseException:
            self._remove_probes()
            raise
        self._started = self._last = time.time()
        self._running = True
        choice, _ = self._running_engine()
        return choice

    def _start_engine(self) -> None:
        """Start the chosen engine; where the kernel refuses what auto chose, the next one, saying why."""
        choice = self.choice
        assert choice is not None, "_choose() comes first"
        self.engine = engine = self._engine(choice)
        try:
            engine.start()
        except BpfError as refused:
            engine.stop()
            if self.requested == "bpf":
                raise UserError(f"--engine bpf: {refused}", "use --engine hist, user or auto") from None
            self._bpf_refused = f"the kernel refused our BPF program: {refused}"
            self.choice = self._choose()
            self._start_engine()
        except KernelRefused as refused:
            # What README and the files promise, a kernel may still refuse (a synthetic event's string
            # field on an old kernel, a config without something): then auto falls back, saying why.
            engine.stop()
            if self.requested != "auto" or choice.engine != "kernel":
                raise
            why = refused.log.message if refused.log else refused.message
            self.choice = choice = Choice("user", "stream", f"the kernel refused a trigger ({why}): events are "
                                                            "read from our trace instance and aggregated here")
            self.engine = engine = self._engine(choice)
            engine.start()

    def _create_probes(self) -> None:
        kept = []
        for target in self.targets.items:
            try:
                self._created += self._events.create(target.probes, run_scoped=True)
            except KernelRefused as exc:
                if not self.targets.globbed:
                    raise
                self.targets.skip(f"refused by the kernel ({exc.log.message if exc.log else exc.message})",
                                  target.label)
                continue
            kept.append(target)
        if not kept:
            raise UserError("the kernel refused every probe", "see the reasons above (kprobe-tui funcs --all)")
        self.targets.items = kept

    def _plan_filter(self) -> str | None:
        """The filter's kernel text per event; returns why the kernel cannot say all of it (None: it can)."""
        self._kernel_filters = {}
        if not self.filter_text:
            return None
        node = filterexpr.parse(self.filter_text)
        refusal = None
        for target in self.targets.items:
            if target.role == "return":
                continue  # a return has no arguments: the entry's filter decides
            text = self.top.read(f"events/{target.group}/{target.event}/format")
            plan = filterexpr.push_down(node, {target.event: filterexpr.field_kinds(text)},
                                        {target.event: filterexpr.field_layout(text)})
            kernel_text = plan.kernel.get(target.event)
            if kernel_text is None:
                refusal = refusal or f"{target.label}: {plan.view_only.get(target.event, 'it never matches this probe')}"
            elif kernel_text:
                self._kernel_filters[target.event] = kernel_text
        return refusal

    def _choose(self) -> Choice:
        raise NotImplementedError

    def _engine(self, choice: Choice) -> EngineT:
        raise NotImplementedError

    def _conditions(self) -> dict[str, str]:
        """Each trigger's filter: the user's (entries only, for latency) and never our own threads."""
        ours = " && ".join(f"common_pid != {tid}" for tid in sorted(int(t) for t in os.listdir("/proc/self/task")))
        return {target.event: f"({self._kernel_filters[target.event]}) && {ours}"
                if target.event in self._kernel_filters else ours for target in self.targets.items}

    def _running_engine(self) -> tuple[Choice, EngineT]:
        """What start() chose: sample() and stop() ask only while _running, which start() sets after both."""
        assert self.choice is not None and self.engine is not None, "a running aggregation has its engine"
        return self.choice, self.engine

    def _remove_probes(self) -> None:
        failures = []
        for event in reversed(self._created):
            try:
                self._events.delete(event)
            except UserError as exc:
                failures.append(exc.message)
        self._created = []
        if failures:
            raise UserError("; ".join(failures), "kprobe-tui cleanup removes them once this run is gone")


class AggregationRun(ProbeRun[Engine]):
    def __init__(self, top: Tracefs, aggregation: Aggregation, targets: Targets, filter_text: str = "",
                 engine: str = "auto", offer: KernelOffer | None = None, existing: bool = False) -> None:
        super().__init__(top, targets, filter_text, engine, offer, existing)
        self.aggregation = aggregation
        self._perf = ""  # the perf binary that samples existing events for us (set-up 2), if any
        self.rates: deque[float] = deque(maxlen=RATE_HISTORY)
        self._total = Tally()
        self._misses = 0

    def _choose(self) -> Choice:
        if self.existing:
            reader = access.choose_reader(self.top.root)
            if reader.kind.startswith("perf"):
                self._perf = reader.perf
                return Choice("user", "perf", f"the events are sampled and aggregated here: {reader.why}")
            if not reader.kind:
                raise UserError(f"cannot read the events here: {reader.why}", reader.hint)
        profile_only = (self.aggregation.kind == "count" and not self.filter_text
                        and all(key.name == "probe" for key in self.aggregation.keys))
        kinds = {target.probe.spec.is_uprobe for target in self.targets.items}
        offer = self.offer
        if profile_only and len(kinds) > 1 and not (offer.kprobe_profile and offer.uprobe_profile):
            profile_only = False
        bpf_refusal = self._bpf_refused or bpf_engine.unfit(self.aggregation, self.targets.items,
                                                            self.targets.arguments, self.filter_text)
        return choose(self.requested, self.aggregation, offer, profile_only=profile_only, uprobes=True in kinds,
                      filter_refusal=self._plan_filter(), bpf_refusal=bpf_refusal)

    def _engine(self, choice: Choice) -> Engine:
        items, arguments = self.targets.items, self.targets.arguments
        if choice.method == "profile":
            return ProfileEngine(self.top, self.aggregation, items)
        if choice.method == "bpf":
            return BpfEngine(self.top, self.aggregation, items, arguments)
        if choice.method == "hist":
            return KernelHistEngine(self.top, self.aggregation, items, arguments, self._conditions())
        if choice.method == "perf":
            return StudentEngine(self.top, self.aggregation, items, arguments, self.filter_text, self._perf)
        return UserEngine(self.top, self.aggregation, items, arguments, self.filter_text)

    # -- sampling ----------------------------------------------------------------------------------

    def sample(self) -> Sample:
        """What happened since the previous sample, and since the start."""
        with self._lock:
            if not self._running:
                raise RuntimeError("sample() before start() or after stop()")
            return self._sample()

    def _sample(self) -> Sample:
        choice, engine = self._running_engine()
        tally = engine.collect()
        tally.lost += self._missed(choice)
        now = time.time()
        interval = summarize(self.aggregation, tally, engine.name, self._last, now)
        self._total.merge(tally)
        total = summarize(self.aggregation, self._total, engine.name, self._started, now)
        self._last = now
        sample = Sample(interval, total)
        self.rates.append(sample.rate)
        return sample

    def _missed(self, choice: Choice) -> int:
        """Hits of our kprobes the kernel missed since the last sample (kprobe_profile's third column: a
        kretprobe with every slot taken, a probe hit inside another probe's handler)."""
        kprobes = [f"{t.group}/{t.event}" for t in self.targets.items if not t.probe.spec.is_uprobe]
        if not kprobes or choice.method in ("profile", "perf"):  # the profile engine counts its own; a student may not read kprobe_profile
            return 0
        hits = read_hits(self.top)
        missed = sum(hits[name].misses or 0 for name in kprobes if name in hits)
        new = max(0, missed - self._misses)
        self._misses = max(missed, self._misses)
        return new

    def stop(self) -> Sample | None:
        """The last sample, then remove the triggers, the instance and the probes. Safe to call twice."""
        with self._lock:
            final = None
            if self._running:
                _, engine = self._running_engine()
                self._running = False
                try:
                    engine.drain()
                    final = self._sample()
                finally:
                    try:
                        engine.stop()
                    finally:
                        self._remove_probes()
            return final
