"""The live aggregation the statistics view shows: its question (``StatsRequest``) and the worker that
runs it (``StatsRunner``), as ``probes.form`` is the builder's. No Textual here: the view draws what
the runner reports; the CLI's ``count``, ``hist`` and ``latency`` build the same targets
(``targets.run_builder``) and run the same ``run.AggregationRun`` (``stackrun.StackRun`` for a count
keyed by stack, as ``count --by stack`` runs it).

Changing the key, the value or the buckets makes a new request and a new run (the kernel engine's
triggers are made for one question); interval or cumulative is only a choice of what to show.
"""

from __future__ import annotations

import queue
import shlex
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypeVar

from kprobe_tui.aggregate.estimate import estimate
from kprobe_tui.aggregate.model import Aggregation, Field, Linear, Log2, keys_offered
from kprobe_tui.aggregate.run import AggregationRun
from kprobe_tui.aggregate.stackrun import STACK_KEY, StackRun
from kprobe_tui.aggregate.targets import GLOB_CHARACTERS, TargetBuilder, Targets, run_builder
from kprobe_tui.aggregate.user_engine import existing_targets
from kprobe_tui.errors import UserError
from kprobe_tui.kernel.events import DynamicEvent
from kprobe_tui.kernel.tracefs import Tracefs
from kprobe_tui.probes.edit import edit_target

__all__ = ["LINEAR_BUCKETS", "REFRESH_SECONDS", "STACK_KEY", "StatsRequest", "StatsRunner", "handoff", "nice_linear",
           "probe_request"]

T = TypeVar("T")

REFRESH_SECONDS = 1.0
LINEAR_BUCKETS = 10  # a linear scale derived from the values seen: about this many buckets


@dataclass(frozen=True)
class StatsRequest:
    """The question: where (``spec``: perf-syntax words, as ``kprobe-tui probe`` takes them), and the
    choices the view cycles through: key (None, comm, pid, probe, a field, the stack of a count or histogram), value
    (count, a field, latency) and, for a histogram, linear buckets (None: log2). Asked at an existing probe,
    ``event`` names it (GROUP:EVENT); ``existing``: that event is aggregated as it is, no probe made (a student,
    who may read it as perf record does but make nothing)."""

    spec: tuple[str, ...]
    binary: str | None = None
    fields: tuple[str, ...] = ()  # what the probe captures: keys and values on offer
    function: str | None = None  # latency is of a function, entry to return
    key: str | None = "comm"
    value: str = "count"
    linear: Linear | None = None
    engine: str = "auto"
    event: str | None = None
    existing: bool = False

    def as_existing(self) -> StatsRequest:
        """The same question of the existing event itself: keyed and valued by what it captures, no stack, no
        latency (those need probes of our own)."""
        changed = replace(self, existing=True)
        changed = changed if changed.value in changed.values_offered() else replace(changed, value="count")
        return changed if changed.key in changed.keys_offered() else replace(changed, key="comm")

    @property
    def glob(self) -> bool:
        return any(c in self.spec[0] for c in GLOB_CHARACTERS)

    @property
    def kind(self) -> str:
        return self.value if self.value in ("count", "latency") else "hist"

    def keys_offered(self) -> list[str | None]:
        """None (one total), what the model lets this kind be keyed by, and the stack (a latency's at the entry),
        for a run that makes its own probes."""
        stack = [] if self.existing else [STACK_KEY]
        return [None, *keys_offered(self.kind, self.fields, several_probes=self.glob), *stack]

    def values_offered(self) -> list[str]:
        return ["count", *self.fields, *(["latency"] if self.function and not self.glob and not self.existing else [])]

    def cycled(self, what: str) -> StatsRequest:
        """The next key or value; a key the new value cannot have falls back to none."""
        if what == "key":
            return replace(self, key=_following(self.keys_offered(), self.key))
        changed = replace(self, value=_following(self.values_offered(), self.value), linear=None)
        return changed if changed.key in changed.keys_offered() else replace(changed, key=None)

    @property
    def timed_function(self) -> str:
        """The function a latency is of (the view offers latency only where there is one)."""
        if self.function is None:
            raise UserError("a latency is of a function, and this probe's place names none",
                            "choose a count or a captured value (v)")
        return self.function

    def aggregation(self) -> Aggregation:
        """The model's question; the stack is no field of it (``StackRun`` keys by it)."""
        keys = (Field(self.key),) if self.key and self.key != STACK_KEY else ()
        if self.kind == "hist":
            return Aggregation("hist", keys, Field(self.value), self.linear or Log2())
        return Aggregation(self.kind, keys)

    def _split_value(self) -> tuple[list[str], str]:
        """The spec without the word capturing the value, and that word (``len=%di:s64``, or ``len``)."""
        words = list(self.spec)
        for at, word in enumerate(words[1:], 1):
            if word.split("=", 1)[0] == self.value:
                return words[:at] + words[at + 1:], word
        return words, self.value

    def targets(self, builder: TargetBuilder) -> Targets:
        aggregation = self.aggregation()
        if self.kind == "latency":
            return builder.latency(self.timed_function, aggregation, "", stacks=self.key == STACK_KEY)
        if self.kind == "hist":
            words, value = self._split_value()
            return builder.histogram(shlex.join(words), value, aggregation, "", stacks=self.key == STACK_KEY)
        return builder.counting([shlex.join(self.spec)], aggregation, "", stacks=self.key == STACK_KEY)

    def run(self, top: Tracefs, builder: TargetBuilder | None) -> tuple[AggregationRun | StackRun, Targets]:
        """The run that answers it, not started, and its targets (``builder``: None for an existing event)."""
        if self.existing and self.event:
            targets = existing_targets(top, [self.event])
            return AggregationRun(top, self.aggregation(), targets, engine=self.engine, existing=True), targets
        assert builder is not None, "a run that makes its probes builds them"
        targets = self.targets(builder)
        if self.key == STACK_KEY:
            histogram = None
            if self.kind == "hist":
                histogram = Aggregation("hist", (Field(STACK_KEY),), Field(self.value), self.linear or Log2())
            elif self.kind == "latency":
                histogram = Aggregation("latency", (Field(STACK_KEY),))
            return StackRun(top, targets, engine=self.engine, histogram=histogram), targets
        return AggregationRun(top, self.aggregation(), targets, engine=self.engine), targets

    def command(self) -> list[str]:
        """The same question on the command line (what an administrator runs in lab mode)."""
        where = ["-x", self.binary] if self.binary else []
        by = ["--by", self.key] if self.key else []
        if self.existing and self.event:
            field = [self.value] if self.kind == "hist" else []
            return ["kprobe-tui", self.kind, self.event, *field, *by]
        if self.kind == "latency":
            return ["kprobe-tui", "latency", *where, self.timed_function, *by]
        if self.kind == "hist":
            words, value = self._split_value()
            linear = ["--linear", f"{self.linear.low},{self.linear.high},{self.linear.step}"] if self.linear else []
            return ["kprobe-tui", "hist", *where, " ".join(words), value, *by, *linear]
        return ["kprobe-tui", "count", *where, " ".join(self.spec), *by]

    def describe(self) -> str:
        what = {"count": "count", "latency": "latency of", "hist": f"{self.value} at"}[self.kind]
        scale = "" if self.kind == "count" else (f" · linear {self.linear.low}..{self.linear.high} step "
                                                  f"{self.linear.step}" if self.linear else " · log2")
        by = f" · by {self.key}" if self.key else ""
        return f"{what} {self.function if self.kind == 'latency' else self.spec[0]}{by}{scale}"


def _following(offered: list[T], current: T) -> T:
    """The choice after ``current`` in ``offered``, round to the first (the first when it is not offered)."""
    return offered[(offered.index(current) + 1) % len(offered)] if current in offered else offered[0]


def probe_request(event: DynamicEvent) -> StatsRequest:
    """A request at the place of an existing probe, capturing what it captures (the view makes its own
    probe there, in this run's group, and leaves the original alone)."""
    target = edit_target(event)  # a UserError for kinds the probe compiler does not make
    if target.kind not in ("entry", "return", "offset", "line"):
        raise UserError(f"{event.full_name} is a {target.kind}: the statistics view takes kprobes and uprobes")
    place = {"entry": target.function, "return": f"{target.function}%return", "offset": f"{target.function}{target.number}",
             "line": f"{target.function}:{target.number}"}[target.kind]  # a line: every address of it
    args = tuple(target.args.split())
    fields = tuple(dict.fromkeys(word.split("=", 1)[0] for word in args if "=" in word))
    return StatsRequest((place, *args), target.binary, fields, target.function, event=f"{event.group}:{event.event}")


def nice_linear(low: int | None, high: int | None, buckets: int = LINEAR_BUCKETS) -> Linear:
    """A linear scale over the values seen, with a round step (1, 2 or 5 times a power of ten)."""
    low = low or 0
    high = max(high or 0, low)  # the largest value seen: the last bucket holds it
    span = high - low + 1
    step, scale = 1, 1
    while step * buckets < span:
        for factor in (1, 2, 5):
            step = factor * scale
            if step * buckets >= span:
                break
        else:
            scale *= 10
    start = (low // step) * step
    end = max(start + step, -(-(high + 1) // step) * step)
    return Linear(start, end, step)


def _drop(_news: tuple) -> None:
    pass


class StatsRunner:
    """One worker starts the view's runs, samples them once a second and stops them, in turn.

    The worker's thread exists before a run starts, so the run leaves it out with our other threads
    (``common_pid != tid``): a worker per sample would be a new thread each time, and sampling
    ``latency vfs_read`` reads hist files with vfs_read, which would count our own reads. What
    happens is told to ``report((kind, generation, details))`` from the worker: ``estimated`` (a stack
    count's ``StackCost``, measured before it starts: a high one starts only when asked again accepting it),
    ``started`` (the choice, what a glob left out), ``sampled`` (a Sample, the hit rates, a note: user stacks
    shallow for want of frame pointers), ``capped`` (a stack run stopped at its bound: why) or ``failed`` (a
    message).
    """

    def __init__(self, sources, alive: Callable[[], bool]) -> None:
        """``alive``: False once the app is gone (then the run stops, as on close)."""
        self.sources = sources
        self.alive = alive
        self.report: Callable[[tuple], None] = _drop
        self.run: AggregationRun | StackRun | None = None
        self.native_id: int | None = None  # the worker's thread, once it runs
        self.closed = threading.Event()  # set once everything the view made is gone
        self._asks: queue.SimpleQueue = queue.SimpleQueue()  # (generation, request, accept_cost), or None: close

    def ask(self, generation: int, request: StatsRequest, accept_cost: bool = False) -> None:
        """Replace the run by one for ``request`` (asks queued meanwhile: only the newest runs); ``accept_cost``:
        a stack count starts even when its estimate is high."""
        self._asks.put((generation, request, accept_cost))

    def close(self) -> None:
        """Stop the run and remove what it made, in the worker (the caller does not wait)."""
        self._asks.put(None)

    def loop(self, progress: Callable[[tuple], None]) -> None:
        """The worker's body, for the screen's life."""
        self.report, self.native_id = progress, threading.get_native_id()
        self._loop()

    def _loop(self) -> None:
        generation, due = 0, None  # due: when the next sample is taken (None: no run to sample)
        try:
            while self.alive():
                try:
                    ask = self._asks.get(timeout=REFRESH_SECONDS if due is None else max(0.0, due - time.monotonic()))
                except queue.Empty:
                    if due is not None:
                        due = time.monotonic() + REFRESH_SECONDS if self._sample(generation) else None
                    continue
                asks = [ask]
                while not self._asks.empty():
                    asks.append(self._asks.get())
                if None in asks:
                    return
                generation, request, accept_cost = asks[-1]
                self._stop()
                due = time.monotonic() + REFRESH_SECONDS if self._start(generation, request, accept_cost) else None
        finally:
            try:
                self._stop()
            finally:
                self.closed.set()

    def _start(self, generation: int, request: StatsRequest, accept_cost: bool) -> bool:
        try:
            top, builder = (self.sources.tracing(), None) if request.existing else run_builder(self.sources, request.binary)
            run, targets = request.run(top, builder)
            if isinstance(run, StackRun) and not accept_cost:  # an accepted cost was measured and said already
                cost = estimate(run, request.spec[0])
                self.report(("estimated", generation, (cost,)))
                if cost.high and not accept_cost:
                    return False
            run.start()
        except UserError as exc:
            self.report(("failed", generation, (str(exc),)))
            return False
        self.run = run
        self.report(("started", generation, (run.choice, targets.skipped)))
        return True

    def _sample(self, generation: int) -> bool:
        run = self.run
        if run is None:  # a sample is due only while a run is on; this tells mypy so
            return False
        try:
            sample = run.sample()
        except UserError as exc:
            self.report(("failed", generation, (str(exc),)))
            return False
        note = run.shallow_note(run.sampled) if isinstance(run, StackRun) else ""
        self.report(("sampled", generation, (sample, list(run.rates), note)))
        if isinstance(run, StackRun) and run.sampled.capped:  # as the CLI does: the view keeps what it counted
            self._stop()
            self.report(("capped", generation, (run.sampled.capped_message(),)))
            return False
        return True

    def _stop(self) -> None:
        run, self.run = self.run, None
        if run is not None:
            run.stop()


def handoff(request: StatsRequest) -> str:
    """In lab mode: the command an administrator runs instead (quoted: it parses back to its words)."""
    return shlex.join(["sudo", *request.command()])
