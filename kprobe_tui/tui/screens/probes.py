"""The probes panel: every dynamic event on the system, ours marked, with live hit counts.

Counts come from ``kprobe_profile``/``uprobe_profile``, read once a second off the UI thread;
only the cells that changed are redrawn. Ours (this run's group and the persistent one) can be
switched on and off in this run's trace instance, edited (recreated through the builder),
deleted and tailed. Others' probes are read-only: deleting or editing one needs the same key a
second time, on purpose. In lab mode everything that writes is refused with the reason and the
command an administrator would run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Button, DataTable, Input, Static

from kprobe_tui.errors import UserError
from kprobe_tui.kernel import lifetime
from kprobe_tui.kernel.access import Access
from kprobe_tui.kernel.events import (
    OTHER_RUN,
    OTHERS,
    PERSISTENT,
    STALE,
    THIS_RUN,
    DynamicEvent,
    Events,
    kind_of,
)
from kprobe_tui.kernel.profile import ProbeHits, rates, read_hits
from kprobe_tui.probes.edit import EditTarget, edit_target
from kprobe_tui.probes.spec import DEFAULT_PERSISTENT_GROUP
from kprobe_tui.textsafe import printable
from kprobe_tui.tui.navigation import Back, EditProbe, OpenStats, ShowEvents
from kprobe_tui.tui.plain import plain
from kprobe_tui.tui.screens.stats import probe_request
from kprobe_tui.tui.theming import LAYOUT
from kprobe_tui.tui.tracing import RunTracing
from kprobe_tui.tui.widgets.filter_bar import FilterBar
from kprobe_tui.tui.widgets.key_footer import KeyFooter
from kprobe_tui.tui.work import Background

if TYPE_CHECKING:
    from kprobe_tui.kernel.tracefs import Tracefs

REFRESH_SECONDS = 1.0
OURS = (THIS_RUN, PERSISTENT)
COLUMNS = (("mark", ""), ("name", "group/event"), ("kind", "kind"), ("hits", "hits"), ("rate", "/s"),
           ("misses", "miss"), ("on", "on"))
_OWNER_WORDS = {THIS_RUN: "this run (removed on exit)", PERSISTENT: "kprobe-tui (kept until del)",
                OTHER_RUN: "another running kprobe-tui", STALE: "a kprobe-tui run that died (kprobe-tui cleanup)",
                OTHERS: "someone else"}


@dataclass(frozen=True)
class Sample:
    """One reading of the kernel, taken off the UI thread."""

    events: list[DynamicEvent]
    hits: dict[str, ProbeHits]
    enabled: dict[str, str]  # group/event -> "top", "run", "top+run" or ""
    taken: float
    problem: str = ""  # why the list is empty, when it could not be read


class ProbesScreen(Screen):
    """All dynamic events, ours marked; ``access`` says whether this user may change anything."""

    CSS_PATH = LAYOUT
    AUTO_FOCUS = "DataTable"
    COMPONENT_CLASSES: ClassVar[set[str]] = {"probes--ours", "probes--others", "probes--our-name"}
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("slash", "focus_filter", "Filter"),
        Binding("space", "toggle_probe", "On/off"),
        Binding("t", "tail", "Tail"),
        Binding("a", "stats", "Stats", show=False),  # listed by help and the palette; the footer is full
        Binding("e", "events", "Events", show=False),
        Binding("b", "edit", "Edit"),
        Binding("d,delete", "delete", "Delete"),
        Binding("escape", "back", "Back"),
    ]

    def __init__(self, tracefs: Tracefs, access: Access | None = None) -> None:
        super().__init__()
        self.tracefs = tracefs
        self.events = Events(tracefs)
        self.access = access
        self.work = Background(self)
        self.sample: Sample | None = None
        self.previous: Sample | None = None
        self.shown: dict[str, tuple] = {}  # group/event -> the cells on screen
        self.filter_text = ""
        self._insisting: tuple[str, str] | None = None  # (action, group/event) awaiting its second press

    def compose(self) -> ComposeResult:
        yield Static("reading dynamic events…", id="status")
        yield FilterBar("type a part of group/event, kind or binary")
        yield DataTable(cursor_type="row", zebra_stripes=True)
        yield Static("", id="detail")
        yield Static("", id="message")
        with Horizontal(id="actions"):
            yield Button("On/off", id="toggle", compact=True)
            yield Button("Tail", id="tail", compact=True)
            yield Button("Edit", id="edit", compact=True)
            yield Button("Delete", id="delete", variant="error", compact=True)
        yield KeyFooter()

    def on_mount(self) -> None:
        self._reset_table()
        self.work.every(REFRESH_SECONDS, "sample", self.read_sample, then=self.show_sample)

    def refresh_sample(self) -> None:
        """Read again now (after a change), rather than at the next tick."""
        self.work.run("sample", self.read_sample, then=self.show_sample)

    @property
    def tracing(self) -> RunTracing:
        return RunTracing.of(self.app, self.tracefs)

    # --- reading (worker thread) -------------------------------------------------------------------

    def read_sample(self) -> Sample:
        problem = ""
        try:
            events = self.events.list()
        except UserError as exc:
            events, problem = [], str(exc)
        on_in = {"top": self.events.enabled_names(), "run": self.events.enabled_names(lifetime.run_name())}
        enabled = {event.full_name: "+".join(label for label, names in on_in.items() if event.full_name in names)
                   for event in events}
        return Sample(events, read_hits(self.tracefs), enabled, time.monotonic(), problem)

    # --- showing (UI thread) -------------------------------------------------------------------------

    def show_sample(self, sample: Sample) -> None:
        tables = self.query(DataTable)
        if not self.is_attached or not tables:  # closed, or its widgets already removed while it closes
            return
        if sample.problem:
            self._say(sample.problem, "error")
        self.previous, self.sample = self.sample, sample
        per_second = rates(self.previous.hits, sample.hits, sample.taken - self.previous.taken) if self.previous else {}
        table = tables.first()
        selected = self.current()
        wanted = {event.full_name: self._cells(event, sample, per_second) for event in sample.events
                  if self._matches(event)}
        for name in [name for name in self.shown if name not in wanted]:
            table.remove_row(name)
            del self.shown[name]
        added = False
        for name, cells in wanted.items():
            if name not in self.shown:
                table.add_row(*cells, key=name)
                added = True
            else:
                for (key, _label), old, new in zip(COLUMNS, self.shown[name], cells):
                    if old != new:
                        table.update_cell(name, key, new)
            self.shown[name] = cells
        if added:  # a new event sorts among the others
            table.sort("name", key=lambda name: name.plain)
        if selected is not None and selected.full_name in self.shown:  # the cursor stays on its probe
            table.move_cursor(row=table.get_row_index(selected.full_name), animate=False)
        ours = sum(1 for event in sample.events if event.owner in OURS and event.full_name in wanted)
        matching = f" matching {self.filter_text!r}" if self.filter_text else ""
        mode = f" │ LAB MODE: {self.access.can_create.why_not}" if self.access and not self.access.can_create else ""
        self.query_one("#status", Static).update(plain(
            f"{len(wanted)} probes{matching} · {ours} ours (● = {lifetime.run_name()} or {DEFAULT_PERSISTENT_GROUP})"
            f"{mode}"))
        self._show_detail()

    def _reset_table(self) -> None:
        table = self.query_one(DataTable)
        table.clear(columns=True)
        for key, label in COLUMNS:
            table.add_column(label, key=key)
        self.shown = {}

    def _cells(self, event: DynamicEvent, sample: Sample, per_second: dict[str, float]) -> tuple:
        hits = sample.hits.get(event.full_name)
        ours = event.owner in OURS
        rate = per_second.get(event.full_name)
        mark = self.get_component_rich_style("probes--ours" if ours else "probes--others", partial=True)
        name = self.get_component_rich_style("probes--our-name", partial=True) if ours else ""
        return (
            Text("●" if ours else "·", style=mark),
            plain(event.full_name, style=name),
            plain(kind_of(event)),  # a str cell would be parsed as markup
            Text(f"{hits.hits:,}" if hits else "-", justify="right"),
            Text(f"{rate:,.0f}" if rate else "", justify="right"),  # blank when idle: quieter, steadier
            Text(str(hits.misses) if hits and hits.misses is not None else "-", justify="right"),
            Text(sample.enabled.get(event.full_name) or "off"),
        )

    def _matches(self, event: DynamicEvent) -> bool:
        text = self.filter_text.lower()
        return not text or text in event.full_name.lower() or text in kind_of(event) or text in event.definition.lower()

    def current(self) -> DynamicEvent | None:
        table = self.query_one(DataTable)
        if self.sample is None or not table.row_count:
            return None
        name = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        return next((event for event in self.sample.events if event.full_name == name), None)

    @on(DataTable.RowHighlighted)
    def _show_detail(self) -> None:
        event = self.current()
        detail = self.query_one("#detail", Static)
        if event is None:
            detail.update(Text("no dynamic events" + ("" if not self.filter_text else " match the filter")))
            return
        hits = self.sample.hits.get(event.full_name) if self.sample else None
        counted = (f"{hits.hits:,} hits" + (f", {hits.misses:,} missed" if hits.misses is not None else "")
                   if hits else "no profile counts for this kind")
        state = self.sample.enabled.get(event.full_name) if self.sample else ""
        on_where = {"top": "on in the top-level buffer", "run": "on in this run's instance",
                    "top+run": "on in the top-level buffer and this run's instance"}.get(state or "", "off")
        detail.update(Text.assemble((printable(event.definition), "bold"), "\n",  # its path is anyone's
                                    printable(f"{kind_of(event)} of {_OWNER_WORDS[event.owner]} · {counted} · {on_where}")))

    def _say(self, text: str, kind: str = "") -> None:
        message = self.query_one("#message", Static)
        message.set_classes(kind)
        message.update(plain(text))

    def _failed(self, exc: UserError) -> None:
        self._say(str(exc), "error")

    # --- filter ------------------------------------------------------------------------------------

    def action_focus_filter(self) -> None:
        self.query_one(FilterBar).focus_now()

    @on(Input.Changed, "#filter")
    def _filter_changed(self, message: Input.Changed) -> None:
        self.filter_text = message.value.strip()
        self._reset_table()  # columns as wide as what the filter leaves, not as what it hid
        if self.sample is not None:
            self.previous, sample = None, self.sample
            self.show_sample(sample)

    @on(Input.Submitted, "#filter")
    def _filter_submitted(self) -> None:
        self.set_focus(self.query_one(DataTable))

    def action_back(self) -> None:
        table = self.query_one(DataTable)
        if not table.has_focus:
            self.set_focus(table)
        else:
            self.post_message(Back())

    # --- actions -------------------------------------------------------------------------------------

    def _writable(self, event: DynamicEvent, action: str, key: str, admin_command: str) -> bool:
        """May ``action`` change ``event``? Lab mode: never; others' probes: on the second press."""
        if self.access is not None and not self.access.can_create:
            self._say(f"lab mode: {self.access.can_create.why_not}. An administrator can run: {admin_command}", "error")
            return False
        if event.owner in OURS or self._insisting == (action, event.full_name):
            self._insisting = None
            return True
        self._insisting = (action, event.full_name)
        self._say(f"this probe belongs to group {event.group}, made by {_OWNER_WORDS[event.owner]}; "
                  f"press {key} again to {action} it anyway", "warning")
        return False

    @on(Button.Pressed, "#toggle")
    def action_toggle_probe(self) -> None:  # not action_toggle: DOMNode's, of an attribute
        """On or off in this run's instance (the top-level buffer is shared and left alone)."""
        event = self.current()
        if event is None:
            return
        if self.access is not None and not self.access.can_tail:
            self._say(f"lab mode: recording is not permitted ({self.access.can_tail.why_not})", "error")
            return
        tracing = self.tracing
        if not tracing.recording:  # nothing records yet: tailing it is what switches it on
            self.action_tail()
            return
        on = not tracing.is_on(event.group, event.event)
        where = tracing.instance_name
        said = (f"{event.full_name} on in {where}: its events go to the events screen" if on
                else f"{event.full_name} off in {where}")
        tracing.switch(event.group, event.event, on, then=lambda _: self._changed(said), failed=self._failed)

    def _changed(self, said: str) -> None:
        self._say(said)
        self.refresh_sample()

    @on(Button.Pressed, "#tail")
    def action_tail(self) -> None:
        """The events screen on this probe: the one already recording (switched on there), or a new one."""
        event = self.current()
        if event is None:
            return
        if self.access is not None and not self.access.can_tail:
            self._say(f"tailing is not permitted: {self.access.can_tail.why_not}", "error")
            return
        self.post_message(ShowEvents([event.full_name]))

    def action_events(self) -> None:
        """Back to the events screen that records, rather than a second one (there is one instance per run)."""
        self.post_message(ShowEvents([]))

    @on(Button.Pressed, "#delete")
    def action_delete(self) -> None:
        event = self.current()
        if event is None or not self._writable(event, "delete", "d", f"sudo kprobe-tui del {event.full_name}"):
            return
        tracing = self.tracing
        if tracing.is_on(event.group, event.event):  # off in our instance first, through the session that knows it
            tracing.switch(event.group, event.event, False, then=lambda _: self._delete(event), failed=self._failed)
        else:
            self._delete(event)

    def _delete(self, event: DynamicEvent) -> None:
        self.work.queue("kernel", self.events.delete, event, then=lambda _: self._changed(f"deleted {event.full_name}"),
                        failed=self._failed)

    @on(Button.Pressed, "#edit")
    def action_edit(self) -> None:
        event = self.current()
        if event is not None:  # its filter read, and a uprobe's function found in the binary: off the UI thread
            self.work.run("edit", self._edit_target, event, then=lambda target: self._edit(event, target),
                          failed=self._failed)

    def _edit_target(self, event: DynamicEvent) -> EditTarget:
        return edit_target(event, self.events.filter_of(event.group, event.event))

    def _edit(self, event: DynamicEvent, target: EditTarget) -> None:
        if self._writable(event, "edit", "b", f"sudo kprobe-tui del {event.full_name}, then create it anew"):
            self.post_message(EditProbe(event, target))

    def action_stats(self) -> None:
        """The statistics view of the highlighted probe."""
        event = self.current()
        if event is None:
            return
        try:
            self.post_message(OpenStats(probe_request(event)))
        except UserError as exc:
            self._say(str(exc), "error")
