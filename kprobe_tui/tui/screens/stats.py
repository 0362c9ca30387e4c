"""The statistics view: counts, a value's histogram or a function's latency, live, for one probe place.

A view of ``aggregate.live``: the question is a ``StatsRequest``, and the run is started, sampled
once a second and stopped off the UI thread by one long-lived worker (``StatsRunner.loop`` in the
``runs`` lane); its news comes back as the worker's progress reports, on the UI thread. Whatever
the view starts (probes, an instance, triggers, synthetic events) goes when it closes.
"""

from __future__ import annotations

from dataclasses import replace

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Input, Sparkline, Static

from kprobe_tui.aggregate.estimate import StackCost
from kprobe_tui.aggregate.live import STACK_KEY, StatsRequest, StatsRunner, handoff, nice_linear, probe_request
from kprobe_tui.aggregate.model import Linear, parse_linear
from kprobe_tui.aggregate.offer import Choice
from kprobe_tui.aggregate.result import Result
from kprobe_tui.aggregate.run import Sample
from kprobe_tui.aggregate.text import stats_line
from kprobe_tui.errors import UserError
from kprobe_tui.stream.stacks import StackCounts, StackTable
from kprobe_tui.tui.navigation import Back
from kprobe_tui.tui.plain import plain
from kprobe_tui.tui.screens.flame import OpenFlame
from kprobe_tui.tui.theming import LAYOUT
from kprobe_tui.tui.widgets.key_footer import KeyFooter
from kprobe_tui.tui.widgets.stats_table import StatsTable
from kprobe_tui.tui.work import Background

RATE_SECONDS = 60  # sparkline history, as the events screen keeps it
CALLED_FROM = " ← "  # between a stack's frames in its row, innermost first: the probed function leads
# Stacks made into row text, most hits first: more rows than a screen has (the table names only those that
# fit and counts the rest). All of 10k stacks took 110-180 ms here, once a second on the UI thread.
STACK_ROWS = 500
# The model's names the app and the screens that open this view import from here.
__all__ = ["StatsRequest", "StatsScreen", "handoff", "nice_linear", "probe_request"]


class StatsScreen(Screen):
    """``StatsScreen(request, sources)`` runs it; ``StatsScreen.replay(...)`` shows a fixed sample."""

    CSS_PATH = LAYOUT
    AUTO_FOCUS = "StatsTable"  # its arrows scroll the keys (Textual's default would focus the hidden range box)
    BINDINGS = [
        Binding("k", "cycle('key')", "Key"),
        Binding("v", "cycle('value')", "Value"),
        Binding("b", "buckets", "Log2/linear"),
        Binding("r", "linear_range", "Linear range", show=False),  # listed by help and the palette
        Binding("i", "interval", "Interval/total"),
        Binding("f", "flame", "Flame graph", show=False),  # listed by help and the palette; a stack key only
        Binding("y", "accept_cost", "Count anyway", show=False),  # a stack count whose estimate was high
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
        self.cost: StackCost | None = None  # a stack count's estimate, said before it starts
        self.skipped: dict[str, list[str]] = {}  # functions a glob left out, by why
        self.noted = False  # the run's note (shallow user stacks) was shown: once a run
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
            self._restart(self.runner)
        self._show()

    def on_unmount(self) -> None:
        """The run stops in the runner's thread (a user-space run lets its reader drain first)."""
        if self.runner is not None:
            self.runner.close()

    def _restart(self, runner: StatsRunner, accept_cost: bool = False) -> None:
        self._generation += 1
        self.sample, self.rates, self.choice, self.error, self.skipped, self.noted = None, [], None, None, {}, False
        self.cost = None
        runner.ask(self._generation, self.request, accept_cost)
        self._show()

    def _news(self, news: tuple) -> None:
        kind, generation, details = news
        getattr(self, f"_{kind}")(generation, *details)

    # --- results (UI thread) --------------------------------------------------------------------------

    def _estimated(self, generation: int, cost: StackCost) -> None:
        if generation == self._generation:
            self.cost = cost
            if cost.high:
                self.notify(f"{cost.line()}. y: count anyway; k: another key", title="Costly", severity="warning",
                            timeout=30)
            else:
                self.notify(cost.line(), title="Counting stacks", timeout=8)
            self._show()

    def _started(self, generation: int, choice: Choice, skipped: dict[str, list[str]]) -> None:
        if generation == self._generation:
            self.choice, self.skipped = choice, skipped
            self._show()

    def _sampled(self, generation: int, sample: Sample, rates: list[float], note: str) -> None:
        if generation == self._generation:
            if note and not self.noted:
                self.notify(note, title="Shallow stacks", severity="warning", timeout=15)
            self.sample, self.rates, self.noted = sample, rates, self.noted or bool(note)
            self._show()

    def _capped(self, generation: int, message: str) -> None:
        if generation == self._generation:
            self.notify(message, title="Stopped", severity="warning", timeout=30)

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
        elif self.choice is None and self.cost is not None and self.cost.high:
            engine.update(plain(f"not started: {self.cost.line()}  (y: count anyway, k: another key)"))
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
        self.query_one(StatsTable).show(self._readable(result), isinstance(request.linear, Linear))
        self.query_one("#summary", Static).update(plain(self._summary(result)))

    @staticmethod
    def _shared_frame(result: Result | None) -> str | None:
        """The innermost frame of every stack, when each has callers below it: the probed function, which
        a row leaves out and the summary names (at 80 columns ``kmem_cache_alloc+0x1 ← `` took a third of
        the room the callers have)."""
        if result is None or STACK_KEY not in result.key_names or not result.entries:
            return None
        at = result.key_names.index(STACK_KEY)
        innermost = {entry.key[at][-1] if len(entry.key[at]) > 1 else None for entry in result.entries}
        return innermost.pop() if len(innermost) == 1 else None

    def _readable(self, result: Result | None) -> Result | None:
        """A result keyed by stack (tuples of frames, outermost first) with each stack as one line, innermost
        frame first: the callers nearest the probe are what a row's width keeps, and where stacks part."""
        if result is None or STACK_KEY not in result.key_names:
            return result
        at = result.key_names.index(STACK_KEY)
        cut = 1 if self._shared_frame(result) else 0
        lead = CALLED_FROM.lstrip() if cut else ""  # "← caller": the row begins below the frame left out
        named = tuple(replace(entry, key=tuple(lead + CALLED_FROM.join(reversed(part[:len(part) - cut])) if index == at
                                               else part for index, part in enumerate(entry.key)))
                      for entry in result.entries[:STACK_ROWS])
        return replace(result, entries=named + result.entries[STACK_ROWS:])

    def _summary(self, result: Result | None) -> str:
        if result is None:
            return ""
        if result.kind == "count":
            keys = len(result.entries)
            text = f"count {result.count:,}" + (f" in {keys:,} key{'s' if keys != 1 else ''}" if result.key_names else "")
        else:
            text = stats_line(result.total, result.unit)
        notes = [f"{name} {getattr(result, name):,}" for name in ("lost", "dropped", "unmatched") if getattr(result, name)]
        shared = self._shared_frame(result)
        return text + (f" · {', '.join(notes)}" if notes else "") + (f" · every stack ends in {shared}" if shared else "")

    # --- choices ------------------------------------------------------------------------------------------

    def _ask(self, request: StatsRequest) -> None:
        if request == self.request:
            return
        self.request = request
        if self.runner is not None:
            self._restart(self.runner)
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
        self.set_focus(self.query_one(StatsTable))
        return True

    def stack_counts(self) -> StackCounts | None:
        """The result's counts per stack when it is keyed by stack (a comm key, too: the outermost frame,
        as ``StackTable.stacks`` folds it); None when it is not."""
        result = self.result
        if result is None or STACK_KEY not in result.key_names:
            return None
        at = result.key_names.index(STACK_KEY)
        comm_at = result.key_names.index("comm") if "comm" in result.key_names else None
        table = StackTable(limit=len(result.entries))
        for entry in result.entries:
            table.add(tuple(entry.key[at]), None if comm_at is None else str(entry.key[comm_at]), entry.count)
        return table.stacks()

    def action_flame(self) -> None:
        """The counted stacks as a flame graph (a stack key only: k chooses the key)."""
        stacks = self.stack_counts()
        if stacks is None:
            self.notify("a flame graph draws stacks: key by stack (k) first", severity="warning")
            return
        shown = "last second" if self.interval else "since start"
        self.post_message(OpenFlame(stacks, f"{self.request.describe()} · {shown}"))

    def action_accept_cost(self) -> None:
        """Start the stack count its estimate held back."""
        if self.runner is not None and self.choice is None and self.cost is not None and self.cost.high:
            self._restart(self.runner, accept_cost=True)

    def action_interval(self) -> None:
        self.interval = not self.interval
        self._show()

    def action_close(self) -> None:
        if not self._close_range():
            self.post_message(Back())
