"""The statistics view: counts, a value's histogram or a function's latency, live, for one probe place.

A view of the aggregation pipeline the CLI runs (``aggregate.run.AggregationRun``): the same
targets, the same engines, the same ``Result``. The run is started, sampled once a second and
stopped off the UI thread by one long-lived worker (``StatsRunner.loop`` in the ``runs`` lane); its
news comes back as the worker's progress reports, on the UI thread. Whatever
the view starts (probes, an instance, triggers, synthetic events) goes when it closes. Changing
the key, the value or the buckets starts a new run (the kernel engine's triggers are made for one
question); interval or cumulative is only a choice of what to show.
"""

from __future__ import annotations

import queue
import shlex
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Input, Sparkline, Static

from kprobe_tui.aggregate.model import Aggregation, Field, Linear, Log2, parse_linear
from kprobe_tui.aggregate.offer import Choice
from kprobe_tui.aggregate.result import Result
from kprobe_tui.aggregate.run import AggregationRun, Sample
from kprobe_tui.aggregate.targets import GLOB_CHARACTERS, TargetBuilder, Targets
from kprobe_tui.aggregate.text import stats_line
from kprobe_tui.errors import UserError
from kprobe_tui.kernel import lifetime
from kprobe_tui.kernel.events import DynamicEvent, Events
from kprobe_tui.probes.edit import edit_target
from kprobe_tui.tui.navigation import Back
from kprobe_tui.tui.plain import plain
from kprobe_tui.tui.theming import LAYOUT
from kprobe_tui.tui.widgets.key_footer import KeyFooter
from kprobe_tui.tui.widgets.stats_table import StatsTable
from kprobe_tui.tui.work import Background

REFRESH_SECONDS = 1.0
RATE_SECONDS = 60  # sparkline history, as the events screen keeps it
LINEAR_BUCKETS = 10  # a linear scale derived from the values seen: about this many buckets


@dataclass(frozen=True)
class StatsRequest:
    """The question: where (``spec``: perf-syntax words, as ``kprobe-tui probe`` takes them), and the
    choices the view cycles through: key (None, comm, pid, probe, a field), value (count, a field,
    latency) and, for a histogram, linear buckets (None: log2)."""

    spec: tuple[str, ...]
    binary: str | None = None
    fields: tuple[str, ...] = ()  # what the probe captures: keys and values on offer
    function: str | None = None  # latency is of a function, entry to return
    key: str | None = "comm"
    value: str = "count"
    linear: Linear | None = None
    engine: str = "auto"

    @property
    def glob(self) -> bool:
        return any(c in self.spec[0] for c in GLOB_CHARACTERS)

    @property
    def kind(self) -> str:
        return self.value if self.value in ("count", "latency") else "hist"

    def keys_offered(self) -> list[str | None]:
        if self.kind == "latency":
            return [None, "comm", "pid"]
        return [None, "comm", "pid", *(["probe"] if self.glob else []), *self.fields]

    def values_offered(self) -> list[str]:
        return ["count", *self.fields, *(["latency"] if self.function and not self.glob else [])]

    def cycled(self, what: str) -> StatsRequest:
        """The next key or value; a key the new value cannot have falls back to none."""
        offered = self.keys_offered() if what == "key" else self.values_offered()
        current = getattr(self, what)
        following = offered[(offered.index(current) + 1) % len(offered)] if current in offered else offered[0]
        changed = replace(self, **{what: following})
        if what == "value":
            changed = replace(changed, linear=None)
            if changed.key not in changed.keys_offered():
                changed = replace(changed, key=None)
        return changed

    def aggregation(self) -> Aggregation:
        keys = (Field(self.key),) if self.key else ()
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
            return builder.latency(self.function, aggregation, "")
        if self.kind == "hist":
            words, value = self._split_value()
            return builder.histogram(shlex.join(words), value, aggregation, "")
        return builder.counting([shlex.join(self.spec)], aggregation, "")

    def command(self) -> list[str]:
        """The same question on the command line (what an administrator runs in lab mode)."""
        where = ["-x", self.binary] if self.binary else []
        by = ["--by", self.key] if self.key else []
        if self.kind == "latency":
            return ["kprobe-tui", "latency", *where, self.function, *by]
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
    return StatsRequest((place, *args), target.binary, fields, target.function)


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
    happens is told to ``report((kind, generation, details))`` from the worker: ``started`` (the
    choice, what a glob left out), ``sampled`` (a Sample, the hit rates) or ``failed`` (a message).
    """

    def __init__(self, sources, alive: Callable[[], bool]) -> None:
        """``alive``: False once the app is gone (then the run stops, as on close)."""
        self.sources = sources
        self.alive = alive
        self.report: Callable[[tuple], None] = _drop
        self.run: AggregationRun | None = None
        self.native_id: int | None = None  # the worker's thread, once it runs
        self.closed = threading.Event()  # set once everything the view made is gone
        self._asks: queue.SimpleQueue = queue.SimpleQueue()  # (generation, request), or None: close

    def ask(self, generation: int, request: StatsRequest) -> None:
        """Replace the run by one for ``request`` (asks queued meanwhile: only the newest runs)."""
        self._asks.put((generation, request))

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
                generation, request = asks[-1]
                self._stop()
                due = time.monotonic() + REFRESH_SECONDS if self._start(generation, request) else None
        finally:
            try:
                self._stop()
            finally:
                self.closed.set()

    def _start(self, generation: int, request: StatsRequest) -> bool:
        try:
            top = self.sources.tracing()
            group = lifetime.run_name()
            builder = TargetBuilder(self.sources, top.read("README") if top.exists("README") else "", group,
                                    binary=request.binary, taken=[e.event for e in Events(top).events_in(group)])
            targets = request.targets(builder)
            run = AggregationRun(top, request.aggregation(), targets, engine=request.engine)
            run.start()
        except UserError as exc:
            self.report(("failed", generation, (str(exc),)))
            return False
        self.run = run
        self.report(("started", generation, (run.choice, targets.skipped)))
        return True

    def _sample(self, generation: int) -> bool:
        try:
            sample = self.run.sample()
        except UserError as exc:
            self.report(("failed", generation, (str(exc),)))
            return False
        self.report(("sampled", generation, (sample, list(self.run.rates))))
        return True

    def _stop(self) -> None:
        run, self.run = self.run, None
        if run is not None:
            run.stop()


class StatsScreen(Screen):
    """``StatsScreen(request, sources)`` runs it; ``StatsScreen.replay(...)`` shows a fixed sample."""

    CSS_PATH = LAYOUT
    AUTO_FOCUS = ""  # nothing: the keys are the screen's (Textual's default would focus the hidden range box)
    BINDINGS = [
        Binding("k", "cycle('key')", "Key"),
        Binding("v", "cycle('value')", "Value"),
        Binding("b", "buckets", "Log2/linear"),
        Binding("r", "linear_range", "Linear range", show=False),  # listed by help and the palette
        Binding("i", "interval", "Interval/total"),
        Binding("escape", "close", "Back"),
    ]

    def __init__(self, request: StatsRequest, sources=None) -> None:
        super().__init__()
        self.request = request
        self.sources = sources
        self.work = Background(self)
        self.runner: StatsRunner | None = None
        self.interval = False  # show the last second (True) or everything since the start
        self.sample: Sample | None = None
        self.rates: list[float] = []
        self.choice: Choice | None = None
        self.error: str | None = None
        self.skipped: dict[str, list[str]] = {}  # functions a glob left out, by why
        self._generation = 0  # samples of a run already replaced are dropped

    @classmethod
    def replay(cls, request: StatsRequest, sample: Sample, rates: list[float], choice: Choice) -> StatsScreen:
        """A fixed sample (no kernel): for pictures and tests of the layout."""
        screen = cls(request)
        screen.sample, screen.rates, screen.choice = sample, rates, choice
        return screen

    def compose(self) -> ComposeResult:
        yield Static("", id="title")
        yield Static("", id="engine")
        with Horizontal(id="rate-row"):
            yield Static("", id="rate")
            yield Sparkline([], id="rates")
        yield StatsTable()
        yield Static("", id="summary")
        yield Input(placeholder="MIN,MAX,STEP  (e.g. 0,1000,100; Enter: apply, Escape: keep)", id="linear-range")
        yield KeyFooter()

    def on_mount(self) -> None:
        if self.sources is not None:
            app = self.app
            self.runner = StatsRunner(self.sources, lambda: app.is_running)
            self.work.run("runs", self.runner.loop, progress=self._news)
            self._restart()
        self._show()

    def on_unmount(self) -> None:
        """The run stops in the runner's thread (a user-space run lets its reader drain first)."""
        if self.runner is not None:
            self.runner.close()

    def _restart(self) -> None:
        self._generation += 1
        self.sample, self.rates, self.choice, self.error, self.skipped = None, [], None, None, {}
        self.runner.ask(self._generation, self.request)
        self._show()

    def _news(self, news: tuple) -> None:
        kind, generation, details = news
        getattr(self, f"_{kind}")(generation, *details)

    # --- results (UI thread) --------------------------------------------------------------------------

    def _started(self, generation: int, choice: Choice, skipped: dict[str, list[str]]) -> None:
        if generation == self._generation:
            self.choice, self.skipped = choice, skipped
            self._show()

    def _sampled(self, generation: int, sample: Sample, rates: list[float]) -> None:
        if generation == self._generation:
            self.sample, self.rates = sample, rates
            self._show()

    def _failed(self, generation: int, message: str) -> None:
        if generation == self._generation:
            self.error = message
            self._show()

    @property
    def result(self) -> Result | None:
        if self.sample is None:
            return None
        return self.sample.interval if self.interval else self.sample.total

    def _show(self) -> None:
        if not self.is_attached:
            return
        request = self.request
        shown = "last second" if self.interval else "since start"
        self.query_one("#title", Static).update(plain(f"{request.describe()} · {shown}"))
        engine = self.query_one("#engine", Static)
        engine.set_class(self.error is not None, "error")
        if self.error is not None:
            engine.update(plain(f"not running: {self.error}  (k/v: another key or value)"))
        elif self.choice is None:
            engine.update(Text("starting: making the probes and choosing the engine…"))
        else:
            left_out = "".join(f" · skipped {len(names)} {why}" for why, names in self.skipped.items())
            engine.update(plain(f"{self.choice.engine} engine: {self.choice.reason}{left_out}"))
        result = self.result
        rate = self.sample.rate if self.sample is not None else 0.0
        self.query_one("#rate", Static).update(plain(f"{rate:,.0f} hits/s"))
        # padded: a sparkline stretches a short history over its width. All zero, it would draw full
        # bars (no scale): an idle probe shows none
        history = ([0.0] * RATE_SECONDS + self.rates)[-RATE_SECONDS:]
        self.query_one("#rates", Sparkline).data = history if any(history) else []
        self.query_one(StatsTable).show(result, isinstance(request.linear, Linear))
        self.query_one("#summary", Static).update(plain(self._summary(result)))

    @staticmethod
    def _summary(result: Result | None) -> str:
        if result is None:
            return ""
        if result.kind == "count":
            keys = len(result.entries)
            text = f"count {result.count:,}" + (f" in {keys:,} key{'s' if keys != 1 else ''}" if result.key_names else "")
        else:
            text = stats_line(result.total, result.unit)
        notes = [f"{name} {getattr(result, name):,}" for name in ("lost", "dropped", "unmatched") if getattr(result, name)]
        return text + (f" · {', '.join(notes)}" if notes else "")

    # --- choices ------------------------------------------------------------------------------------------

    def _ask(self, request: StatsRequest) -> None:
        if request == self.request:
            return
        self.request = request
        if self.runner is not None:
            self._restart()
        self._show()

    def action_cycle(self, what: str) -> None:
        """Another key or value: the kernel counts by what it was asked, so this is a new count, said so."""
        request = self.request.cycled(what)
        if request != self.request and self.runner is not None:
            shown = request.key if what == "key" else request.value
            self.notify(f"a new count {'by' if what == 'key' else 'of'} {shown or 'nothing (one total)'}: "
                        "the kernel counted by the old one", title="Counting again", timeout=4)
        self._ask(request)

    def _buckets_apply(self) -> bool:
        """Whether bucket choices apply (a histogram of a value); if not, says so."""
        if self.request.kind != "hist":
            self.notify("log2 and linear are for a histogram of a value (v: choose one); latency is log2",
                        severity="warning")
        return self.request.kind == "hist"

    def _seen_linear(self) -> Linear:
        total = self.sample.total.total if self.sample is not None else None
        return nice_linear(total.min if total else None, total.max if total else None)

    def action_buckets(self) -> None:
        """log2 <-> linear; the linear scale spans the values seen so far."""
        if self._buckets_apply():
            self._ask(replace(self.request, linear=None if self.request.linear else self._seen_linear()))

    def action_linear_range(self) -> None:
        """Linear buckets over a range the user types (bpftrace's ``lhist(v, MIN, MAX, STEP)``)."""
        if not self._buckets_apply():
            return
        shown = self.request.linear or self._seen_linear()
        box = self.query_one("#linear-range", Input)
        box.value = f"{shown.low},{shown.high},{shown.step}"
        box.add_class("-open")
        self.set_focus(box)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id != "linear-range":
            return
        try:
            linear = parse_linear(event.value.strip())
        except UserError as exc:
            self.notify(f"{exc.message}: {exc.hint}" if exc.hint else exc.message, title="Linear range",
                        severity="error")
            return
        self._close_range()
        self._ask(replace(self.request, linear=linear))

    def _close_range(self) -> bool:
        """Hide the range box if it is open (Escape there keeps the scale)."""
        box = self.query_one("#linear-range", Input)
        if not box.has_class("-open"):
            return False
        box.remove_class("-open")
        self.set_focus(None)
        return True

    def action_interval(self) -> None:
        self.interval = not self.interval
        self._show()

    def action_close(self) -> None:
        if not self._close_range():
            self.post_message(Back())


def handoff(request: StatsRequest) -> str:
    """In lab mode: the command an administrator runs instead (quoted: it parses back to its words)."""
    return shlex.join(["sudo", *request.command()])
