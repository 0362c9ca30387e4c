"""The live events screen: table, filter, detail pane, rates, lost counter, pause, export.

It shows this run's tracing session (``RunTracing``, the app's service: our instance, the reader
thread, the store), starting it for the events asked and stopping it when the screen goes. The
reader posts one ``Ingested`` message per batch (at most ~20 a second); the session's changes
(filter, pause, stacks) run off the UI thread through the service; everything else is method
calls down. Usable on its own: ``EventsScreen(["grp/ev"], sources.tracing())``;
``EventsScreen.replay(events)`` shows captured events without touching the kernel.
"""

from __future__ import annotations

import shlex
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Input, Sparkline, Static

from kprobe_tui.errors import UserError
from kprobe_tui.kernel.access import choose_reader
from kprobe_tui.kernel.events import Events
from kprobe_tui.probes.edit import line_place, uprobe_places
from kprobe_tui.probes.guard import SocketSpotter
from kprobe_tui.stream.export import export
from kprobe_tui.stream.filterexpr import FilterError, compile_filter, parse
from kprobe_tui.stream.parser import Event
from kprobe_tui.stream.reader import StreamUpdate
from kprobe_tui.stream.session import FilterPlan, StudentSession, TailSession
from kprobe_tui.stream.stacks import MAX_STACKS_ENV, StackTable, add_event_stack, max_stacks
from kprobe_tui.stream.store import DEFAULT_CAPACITY, EventStore
from kprobe_tui.textsafe import printable
from kprobe_tui.tui.navigation import Back, OpenStats
from kprobe_tui.tui.plain import plain
from kprobe_tui.tui.screens.flame import OpenFlame
from kprobe_tui.tui.screens.stats import StatsRequest, probe_request
from kprobe_tui.tui.theming import LAYOUT
from kprobe_tui.tui.tracing import RunTracing
from kprobe_tui.tui.widgets.event_table import EventTable, show_value
from kprobe_tui.tui.widgets.filter_bar import FilterBar
from kprobe_tui.tui.widgets.key_footer import KeyFooter
from kprobe_tui.tui.work import Background

if TYPE_CHECKING:
    from kprobe_tui.kernel.tracefs import Tracefs

RATE_SECONDS = 60  # sparkline history
MAX_RATE_ROWS = 3  # at 80x24 the table keeps the room
SPOT_WINDOW = 2000  # the newest events looked at for our sshd's socket, an update at most


class LineProbe(NamedTuple):
    """A tailed probe of a source line: its name as the user asked for it, and its addresses' places."""

    place: str  # work:3, as the builder was asked and the count names it
    addresses: dict[int, str]  # work+33, by offset in a page (uprobe_places); empty for one address


def event_stacks(events: list[Event]) -> StackTable:
    """The events' kernel stacks counted, at most ``max_stacks()`` distinct ones (the events of others are
    ``dropped``); events without one (stacks were off when they came) are left out."""
    table = StackTable(max_stacks())
    for event in events:
        add_event_stack(table, event.stack)
    return table


def line_probes_of(events: Events, targets: list[tuple[str, str]]) -> dict[str, LineProbe]:
    """The tailed events that probe a source line (``line_place``), by event name."""
    wanted = {f"{group}/{event}" for group, event in targets}
    return {event.event: LineProbe(place, uprobe_places(event)) for event in events.list()
            if event.full_name in wanted if (place := line_place(event))}


class Ingested(Message):
    """A batch from the reader thread."""

    def __init__(self, update: StreamUpdate) -> None:
        super().__init__()
        self.update = update


class RateRow(Horizontal):
    """One event's rate: its label and sparkline, held from construction so an update that comes before
    the row is mounted finds them (the 6.1 guest's second update came that soon: NoMatches on the query)."""

    def __init__(self, name: str, label: Text, history: list[float]) -> None:
        super().__init__(classes="rate", name=name)
        self.label = Static(label, classes="rate-label")
        self.sparkline = Sparkline(history)

    def compose(self) -> ComposeResult:
        yield self.label
        yield self.sparkline

    def show(self, label: Text, history: list[float]) -> None:
        self.label.update(label)
        self.sparkline.data = history


class EventsScreen(Screen):
    CSS_PATH = LAYOUT
    AUTO_FOCUS = "EventTable"
    BINDINGS = [
        Binding("slash", "focus_filter", "Filter"),
        Binding("escape", "focus_table", "Back", show=False),
        Binding("p", "pause", "Pause"),
        Binding("enter,d", "toggle_detail", "Detail"),
        Binding("s", "toggle_stack", "Stacks"),
        Binding("a", "stats", "Stats", show=False),  # listed by help and the palette; the footer is full
        Binding("f", "flame", "Flame graph", show=False),  # of the stored events' stacks (s records them)
        Binding("o", "own_socket", "Own socket", show=False),  # over SSH, once our sshd's socket was seen
        Binding("x", "export('jsonl')", "Export"),
        Binding("X", "export('csv')", "CSV", show=False),
    ]

    def __init__(self, patterns: list[str] | None, tracefs: Tracefs | None, max_events: int = DEFAULT_CAPACITY,
                 export_dir: Path | None = None) -> None:
        """Tail ``patterns`` (``group/event`` globs; [] = every probe event) from ``tracefs``;
        ``tracefs=None`` shows only what ``replay()`` puts in the store."""
        super().__init__()
        self.patterns = patterns
        self.tracefs = tracefs
        self.tracing: RunTracing | None = None
        self.session: TailSession | None = None  # while it records for this screen
        self.store = EventStore(max_events)
        self.export_dir = export_dir or Path.cwd()
        self.work = Background(self)
        self.lost = 0
        self.garbled = 0
        # The store's total when the cursor stopped following: "N new" is what came since. Counted from the
        # store, not from the reader's updates: those are coalesced and may arrive after rows they count
        # are already on screen (the binary reader hands over a flood's first event alone, then the rest).
        self.total_when_left = 0
        self.starting = tracefs is not None
        self.stats_asked = False  # ``a`` pressed while starting
        self.finished = False
        self.stopped_because = ""
        self.rates: dict[str, deque[float]] = {}
        self.lines: dict[str, LineProbe] = {}  # the tailed probes of a source line, by event name
        self._second_counts: dict[str, int] = {}
        self._second_start = time.monotonic()
        self.spotter = SocketSpotter.of_this_session()
        self._spotted_to = 0  # the store's total when the spotter last looked

    @classmethod
    def replay(cls, events: list[Event], **kwargs) -> EventsScreen:
        """Show already captured events (no kernel access)."""
        screen = cls(None, None, max(len(events), 1), **kwargs)
        screen.store.extend(events)
        return screen

    def compose(self) -> ComposeResult:
        yield Static("", id="status")
        yield FilterBar('type a filter, e.g. comm == "sshd" && len > 100', "no filter", note_id="filter-side")
        yield Static("", id="filter-error")
        yield EventTable(self.store, id="events")
        yield Vertical(id="rates")
        with VerticalScroll(id="detail"):
            yield Static("", id="detail-text")
        yield KeyFooter()

    def on_mount(self) -> None:
        if self.tracefs is not None:
            self.tracing = RunTracing.of(self.app, self.tracefs)
            self.tracing.start(self.patterns or [], self.store, self._ingest, then=self._recording,
                               failed=self._cannot_record)
        self.query_one(EventTable).rows_changed()
        self._show_status()

    def _ingest(self, update: StreamUpdate) -> None:
        """The reader thread's update, handed to the UI thread."""
        self.post_message(Ingested(update))

    def _recording(self, session: TailSession) -> None:
        self.starting = False
        self.session = session
        if self.tracefs is not None:  # a line's probe shown as the line, and the detail says which address fired
            self.work.run("lines", line_probes_of, Events(self.tracefs), session.targets,
                          then=self._lines_known, failed=lambda _exc: None)
        self._show_status()
        if self.stats_asked:
            self.stats_asked = False
            self.action_stats()

    def _lines_known(self, lines: dict[str, LineProbe]) -> None:
        self.lines = lines
        table = self.query_one(EventTable)
        table.names = {event: line.place for event, line in lines.items()}
        table.refresh()
        self._show_rates()

    def _cannot_record(self, exc: UserError) -> None:
        self.starting = False
        self.finished = True
        reader = choose_reader(self.tracefs.root) if self.tracefs is not None and self.tracefs.writable else None
        if reader is not None and not reader.kind:  # say why in plain words, and what to do instead
            self.stopped_because = f"tailing is not permitted: {reader.why}"
            command = shlex.join(["sudo", "kprobe-tui", "tail", *(self.patterns or [])])
            self.notify(f"{self.stopped_because}. An administrator can tail with: {command}; or, to let you tail, "
                        f"{reader.hint}", title="Cannot tail", severity="error", timeout=30)
        else:
            self.notify(str(exc), title="Cannot tail", severity="error", timeout=30)
        self._show_status()

    def on_unmount(self) -> None:
        if self.tracing is None:
            return
        if not self.app.is_running:  # the app closes: the instance goes with it, now
            self.tracing.close()
        elif self.session is not None or self.starting:
            self.tracing.stop()  # off the UI thread, after any change still queued (a start too)

    # --- updates from the reader --------------------------------------------------------------

    def on_ingested(self, message: Ingested) -> None:
        update = message.update
        table = self.query_one(EventTable)
        self.lost = max(self.lost, update.lost)
        self.garbled = update.garbled
        for name, count in update.per_event.items():
            self._second_counts[name] = self._second_counts.get(name, 0) + count
        self._roll_rates()
        for name in update.vanished:
            self.notify(f"{name} was deleted while tailed; its events stop here", title="Event gone", severity="warning")
        if update.finished:
            self.finished = True
            if update.error:
                self.notify(update.error, title="Reader stopped", severity="error", timeout=30)
        if update.new:
            table.rows_changed()
            if self.spotter.watching:
                self._spot_own_socket()
        self._show_status()

    def _spot_own_socket(self) -> None:
        """Our SSH connection's socket, once an event our sshd caused shows it, is offered as the filter (o).
        Only the newest events are looked at: sshd's come with each key typed."""
        store = self.store
        start, self._spotted_to = max(self._spotted_to, store.oldest, store.total - SPOT_WINDOW), store.total
        own = self.spotter.see(filter(None, map(store.get, range(start, store.total))))
        if own is not None:
            self.notify(f"Your SSH connection's socket is {own.name}={own.address:#x}. o keeps only its events; "
                        f"the filter {own.leave_out} leaves them out.", title="Your own connection", timeout=20)

    def action_own_socket(self) -> None:
        """Filter to our SSH connection's socket (again: leave it out)."""
        own = self.spotter.found
        if own is None:
            self.notify("No event of your SSH connection's sshd has shown its socket yet: tail a probe that captures "
                        "sk (tcp_recvmsg sk) over SSH and type a key.", title="Your own connection", severity="warning")
            return
        filter_input = self.query_one("#filter", Input)
        filter_input.value = own.leave_out if filter_input.value == own.keep else own.keep
        self.apply_filter(filter_input.value)

    def _roll_rates(self) -> None:
        """Per-event events/second, one value per elapsed second, for the sparklines."""
        now = time.monotonic()
        if now - self._second_start < 1.0:
            return
        elapsed = now - self._second_start
        self._second_start = now
        for name in set(self.rates) | set(self._second_counts):
            history = self.rates.setdefault(name, deque([0.0] * RATE_SECONDS, maxlen=RATE_SECONDS))
            history.append(self._second_counts.get(name, 0) / elapsed)
        self._second_counts = {}
        self._show_rates()

    def _show_rates(self) -> None:
        container = self.query_one("#rates", Vertical)
        busiest = sorted(self.rates, key=lambda n: -max(self.rates[n]))[:MAX_RATE_ROWS]
        rows = {row.name: row for row in container.query(RateRow)}
        for name in busiest:
            label = plain(f"{self.query_one(EventTable).name_of(name)} {self.rates[name][-1]:,.0f}/s")
            if name in rows:
                rows[name].show(label, list(self.rates[name]))
            else:
                container.mount(RateRow(name, label, list(self.rates[name])))
        for shown, row in rows.items():
            if shown not in busiest:
                row.remove()

    def _show_status(self) -> None:
        store = self.store
        parts = [f"{store.view_len():,} shown" + (f" / {len(store):,}" if store.filtered else ""),
                 f"lost {self.lost:,}", f"dropped {store.dropped:,}"]
        if self.garbled:
            parts.append(f"unparsed {self.garbled:,}")
        table = self.query_one(EventTable)
        parts.append("following" if table.following else f"{store.total - self.total_when_left:,} new (End: follow)")
        if self.finished:
            parts.append(self.stopped_because or "stopped")
        elif self.starting:
            parts.append("starting")
        elif self.session is None:
            parts.append("replay")
        elif self.session.paused:
            parts.append("PAUSED")
        if isinstance(self.session, StudentSession):
            parts.append("perf_event_open")  # the student reader: no instance, nothing written to tracefs
        self.query_one("#status", Static).update(plain(" │ ".join(parts)))

    # --- table ----------------------------------------------------------------------------------

    @on(EventTable.FollowChanged)
    def _follow_changed(self, message: EventTable.FollowChanged) -> None:
        if not message.following:
            self.total_when_left = self.store.total
        self._show_status()

    @on(EventTable.Highlighted)
    def _highlighted(self, message: EventTable.Highlighted) -> None:
        if self.query_one("#detail").has_class("shown"):
            self._show_detail(message.event)

    def _show_detail(self, event: Event | None) -> None:
        text = self.query_one("#detail-text", Static)
        if event is None:
            text.update("no event")
            return
        if not event.event:
            text.update(plain(f"unparsed line:\n{printable(event.body)}"))
            return
        # all of it the kernel's text and the traced program's memory: one escaped line per field
        line = self.lines.get(event.event)
        named = f"{line.place} (event {event.event})" if line else event.event  # the name a filter gives
        lines = [printable(f"{named}  at {self._place_of(event)}"),
                 f"time {event.ts:.6f}  cpu {event.cpu}  comm {printable(event.comm)!r}  pid {event.pid}"
                 f"  tgid {event.tgid if event.tgid is not None else '?'}  flags {event.flags or '-'}"]
        lines += [f"  {printable(name)} = {show_value(value)}" for name, value in event.args.items()]
        if event.stack is not None:
            lines.append("kernel stack:")
            lines += [f"  {printable(frame)}" for frame in event.stack]
        elif self.session is not None and not self.session.stacktrace:
            lines.append("(s: record kernel stacks)")
        text.update(plain("\n".join(lines)))

    def _place_of(self, event: Event) -> str:
        """Where it fired; for a probe of several addresses (a source line), which one and the others."""
        line = self.lines.get(event.event)
        labels = line.addresses if line else None
        try:
            fired = labels.get(int(event.site, 16) & 0xFFF) if labels else None
        except ValueError:
            fired = None
        if fired is None or labels is None:
            return event.site
        return f"{fired} ({event.site}), one of its {len(labels)} addresses: {', '.join(labels.values())}"

    def action_toggle_detail(self) -> None:
        detail = self.query_one("#detail")
        detail.toggle_class("shown")
        if detail.has_class("shown"):
            self._show_detail(self.query_one(EventTable).current)

    def action_focus_table(self) -> None:
        """Escape: from the filter back to the table; from the table back to the previous screen."""
        table = self.query_one(EventTable)
        if table.has_focus:
            self.post_message(Back())
        else:
            self.set_focus(table)

    # --- filter ---------------------------------------------------------------------------------

    def action_focus_filter(self) -> None:
        self.query_one(FilterBar).focus_now()

    @on(Input.Submitted, "#filter")
    def _filter_submitted(self, message: Input.Submitted) -> None:
        self.apply_filter(message.value)

    def apply_filter(self, text: str) -> None:
        """Apply a filter (in the kernel too, off the UI thread, while recording); on a parse error show
        it at its column and keep the current filter."""
        if self.session is not None and self.tracing is not None:
            self.tracing.set_filter(text, then=self._filter_applied, failed=self._filter_refused)
            return
        try:
            self.store.set_filter(compile_filter(parse(text)) if text.strip() else None)
        except UserError as exc:
            self._filter_refused(exc)
            return
        self._filter_applied("view" if text.strip() else "no filter")

    def _filter_applied(self, plan: FilterPlan | str) -> None:
        self.query_one("#filter-error", Static).remove_class("shown")
        self.query_one(FilterBar).note(plain(plan if isinstance(plan, str) else plan.summary()))
        table = self.query_one(EventTable)
        table.following = True
        table.rows_changed()
        self.set_focus(table)
        self._show_status()

    def _filter_refused(self, exc: UserError) -> None:
        error = self.query_one("#filter-error", Static)
        if isinstance(exc, FilterError):
            error.update(plain(f"{exc.problem}\n{printable(exc.text)}\n{' ' * len(printable(exc.text[:exc.position]))}^"))
        else:
            error.update(plain(str(exc)))
        error.add_class("shown")

    # --- controls -------------------------------------------------------------------------------

    def _recording_now(self) -> tuple[RunTracing, TailSession] | None:
        """The service and the session that record now (None, said, when nothing does)."""
        if self.session is None or self.tracing is None or self.finished:
            self.notify("nothing is being recorded", severity="warning")
            return None
        return self.tracing, self.session

    def action_pause(self) -> None:
        if recording := self._recording_now():
            tracing, session = recording
            tracing.pause(not session.paused, then=lambda _: self._show_status())

    def action_toggle_stack(self) -> None:
        if recording := self._recording_now():
            tracing, session = recording
            tracing.set_stacktrace(not session.stacktrace, then=self._stacks_switched)

    def _stacks_switched(self, _answer) -> None:
        self.notify(f"kernel stacks {'on' if self.session and self.session.stacktrace else 'off'} for new events")

    def action_flame(self) -> None:
        """The kernel stacks of the events shown (as filtered) as a flame graph, counted off the UI thread
        (a full store is a million events)."""
        store = self.store
        shown = store.view_rows(0, store.view_len())
        what = ", ".join(self.patterns or []) or "events"
        self.work.run("flame", event_stacks, shown, then=lambda stacks: self._open_flame(stacks, what),
                      failed=lambda exc: self.notify(str(exc), title="Flame graph", severity="error"))

    def _open_flame(self, table: StackTable, what: str) -> None:
        if not table.counts and not table.dropped:
            self.notify("no kernel stacks among the events shown: s records them for new events", severity="warning")
            return
        stacks = table.stacks()
        left_out = f" · {table.dropped:,} events of further stacks left out ({MAX_STACKS_ENV})" if table.dropped else ""
        self.post_message(OpenFlame(stacks, f"{what} · kernel stacks of {sum(stacks.values()):,} events{left_out}"))

    def action_export(self, fmt: str) -> None:
        """Write the rows the view shows (filtered or not) next to where we were started."""
        store = self.store
        path = self.export_dir / f"kprobe-tui-events-{time.strftime('%Y%m%d-%H%M%S')}.{fmt}"
        self.work.run("export", export, store.view_rows(0, store.view_len()), path, fmt,
                      then=lambda count: self.notify(f"{count:,} events written to {path}", title="Exported"),
                      failed=lambda exc: self.notify(str(exc), title="Export failed", severity="error", timeout=15))

    def action_stats(self) -> None:
        """The statistics view of the probe being tailed: the highlighted event's, else the only one."""
        if self.starting:  # pressed before the tail is up (a fast typist): answered once it is
            self.stats_asked = True
            return
        targets = self.session.targets if self.session is not None else []
        current = self.query_one(EventTable).current
        chosen = next((target for target in targets if current is not None and target[1] == current.event), None)
        if chosen is None and len(targets) == 1:
            chosen = targets[0]
        tracefs = self.tracefs
        if chosen is None or tracefs is None:  # no session (a replay) has no targets either
            self.notify("no probe to show: tail one probe, or highlight one of its events", severity="warning")
            return
        name = "/".join(chosen)

        def request_of(events: Events) -> StatsRequest:  # reads dynamic_events: off the UI thread
            event = next((e for e in events.list() if e.full_name == name), None)
            if event is None:
                raise UserError(f"{name} is gone")
            return probe_request(event)

        self.work.run("stats", request_of, Events(tracefs),
                      then=lambda request: self.post_message(OpenStats(request)),
                      failed=lambda exc: self.notify(str(exc), title="Statistics", severity="error"))
