"""The live event table on Textual's Line API: only the rows on screen are ever formatted.

Rows come from an ``EventStore`` view (all events, or the filter's matches). Follow mode keeps
the cursor on the newest row; moving up stops following and the owner shows "N new"; End
follows again. The first line is a header that stays put while the rows scroll.
"""

from __future__ import annotations

from rich.segment import Segment
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.strip import Strip

from kprobe_tui.stream.parser import FAULT, Event
from kprobe_tui.stream.store import EventStore
from kprobe_tui.textsafe import printable
from kprobe_tui.tui.widgets.cursor_view import CursorView

FIXED_COLUMNS = [("TIME", ">", 12), ("CPU", ">", 3), ("COMM", "<", 15), ("PID", ">", 7), ("EVENT", "<", 12)]
MAX_ARG_WIDTH = 24


def show_value(value) -> str:
    """A captured value on one line: the traced program's memory, so every control is shown escaped."""
    if value is FAULT:
        return "(fault)"
    if isinstance(value, list):
        return "{" + ",".join(map(show_value, value)) + "}"
    return printable(str(value).replace("\n", "⏎").replace("\t", "→"))


def quoted(value) -> str:
    """A value in a ``name=value`` list: strings quoted, so spaces inside them read as such."""
    return f'"{show_value(value)}"' if isinstance(value, str) else show_value(value)


class EventTable(CursorView):
    """Rows of an ``EventStore``; ``rows_changed()`` after the store grows or its filter changes."""

    COMPONENT_CLASSES = {"event-table--header", "event-table--cursor", "event-table--raw"}
    header_lines = 1
    BINDINGS = [
        Binding("end", "follow", "Follow"),
        Binding("left", "scroll_left", "Left", show=False),
        Binding("right", "scroll_right", "Right", show=False),
        Binding("t", "toggle_time", "Abs/rel time"),
    ]

    class Highlighted(Message):
        """The cursor is on another event (None: the table is empty)."""

        def __init__(self, event: Event | None) -> None:
            super().__init__()
            self.event = event

    class FollowChanged(Message):
        def __init__(self, following: bool) -> None:
            super().__init__()
            self.following = following

    following: reactive[bool] = reactive(True, repaint=False, init=False)  # the cursor rides the newest row
    absolute_time: reactive[bool] = reactive(False, init=False)  # every row's time changes: all repainted

    def watch_following(self, following: bool) -> None:
        self.post_message(self.FollowChanged(following))

    def __init__(self, store: EventStore, **kwargs) -> None:
        super().__init__(**kwargs)
        self.store = store
        self.base_time: float | None = None  # relative times count from the first event seen
        self.names: dict[str, str] = {}  # an event shown by another name: a source line's probe as the line
        self._visible_key: tuple | None = None
        self._visible: tuple[list[Event], list[tuple[str, int]] | None] = ([], None)

    # --- data ---------------------------------------------------------------------------------

    def rows_changed(self) -> None:
        """The store grew or was re-filtered: resize, and keep following the newest row."""
        count = self.store.view_len()
        if self.base_time is None and count:
            first = self.store.view_row(0)
            self.base_time = first.ts if first else None
        self._fit_virtual_size()
        if self.following or self.cursor >= count:
            self.move_cursor(count - 1)
        self.refresh()

    @property
    def current(self) -> Event | None:
        return self.store.view_row(self.cursor)

    def name_of(self, event: str) -> str:
        """What the EVENT column shows for the kernel's event name ``event``."""
        return self.names.get(event, event)

    # --- rendering ----------------------------------------------------------------------------

    def on_resize(self) -> None:
        self._fit_virtual_size()

    def _fit_virtual_size(self) -> None:
        self.virtual_size = Size(max(self.size.width, self._content_width()), self.store.view_len() + 1)

    def _content_width(self) -> int:
        """Width of the rows on screen: wider than the terminal scrolls sideways (left/right)."""
        rows, columns = self._rows_on_screen(int(self.scroll_offset.y))
        return len(self._header(columns)) if columns else max((len(self._cells(ev, None)) for ev in rows), default=0)

    def _rows_on_screen(self, scroll_y: int) -> tuple[list[Event], list[tuple[str, int]] | None]:
        """The rows in view and their argument columns, computed once per frame, not per line."""
        height = max(1, self.scrollable_content_region.height) - 1
        store = self.store
        key = (scroll_y, height, store.total, store.generation)
        if key != self._visible_key:
            rows = store.view_rows(scroll_y, scroll_y + height)
            self._visible_key, self._visible = key, (rows, self._arg_columns(rows))
        return self._visible

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        scroll_x, scroll_y = int(self.scroll_offset.x), int(self.scroll_offset.y)
        rows, columns = self._rows_on_screen(scroll_y)
        if y == 0:
            return self._strip(self._header(columns), self.get_component_rich_style("event-table--header"), width,
                               scroll_x)
        index = scroll_y + y - 1
        if index - scroll_y >= len(rows):
            return Strip.blank(width, self.rich_style)
        event = rows[index - scroll_y]
        style = self.rich_style
        if index == self.cursor:
            style = style + self.get_component_rich_style("event-table--cursor", partial=True)
        if not event.event:
            return self._strip(f"{'(unparsed)':>12} {event.body}", style + self.get_component_rich_style(
                "event-table--raw", partial=True), width, scroll_x)
        return self._strip(self._cells(event, columns), style, width, scroll_x)

    def _strip(self, text: str, style, width: int, scroll_x: int) -> Strip:
        """One row: comm, event names, the site and raw lines are as the kernel printed them (a process
        names itself): escaped here, the one way any row reaches a Segment."""
        return Strip([Segment(printable(text), style)]).extend_cell_length(scroll_x + width, style).crop(
            scroll_x, scroll_x + width)

    def _arg_columns(self, rows: list[Event]) -> list[tuple[str, int]] | None:
        """One column per argument when the rows on screen are all one event type."""
        names = {ev.event for ev in rows}
        if len(names) != 1 or "" in names:
            return None
        columns: dict[str, int] = {}
        for ev in rows:
            for name, value in ev.args.items():
                columns[name] = min(MAX_ARG_WIDTH, max(columns.get(name, len(name)), len(show_value(value))))
        return list(columns.items())

    def _header(self, columns: list[tuple[str, int]] | None) -> str:
        cells = [f"{name:{align}{width}}" for name, align, width in FIXED_COLUMNS]
        if columns is None:
            cells.append("ARGS")
        else:
            cells += [f"{name.upper():<{width}}" for name, width in columns]
        return " ".join(cells)

    def _cells(self, event: Event, columns: list[tuple[str, int]] | None) -> str:
        if self.absolute_time:
            time = f"{event.ts:12.6f}"
        else:
            time = f"{event.ts - (self.base_time or event.ts):+12.6f}"
        cells = [time[-12:], f"{event.cpu:>3}", f"{printable(event.comm)[:15]:<15}", f"{event.pid:>7}",
                 f"{printable(self.name_of(event.event))[:12]:<12}"]
        args = event.args
        if columns is None:
            cells.append(" ".join(f"{name}={quoted(value)}" for name, value in args.items()) or event.site)
        else:
            for name, width in columns:
                text = show_value(args.get(name, ""))
                cells.append(f"{text[:width - 1] + '…' if len(text) > width else text:<{width}}")
        return " ".join(cells)

    # --- cursor and follow --------------------------------------------------------------------

    def row_count(self) -> int:
        return self.store.view_len()

    def cursor_moved(self, previous: int) -> None:
        if self.cursor != previous or not self.row_count():
            self.post_message(self.Highlighted(self.current))

    def _follow(self, following: bool) -> None:
        self.following = following  # FollowChanged when it changes (watch_following)

    def action_move(self, delta: int) -> None:
        """Moving onto the newest row follows again; any other move stops following."""
        self._follow(self.cursor + delta >= self.row_count() - 1)
        super().action_move(delta)

    def action_jump(self, index: int) -> None:
        self._follow(False)
        super().action_jump(index)

    def action_follow(self) -> None:
        self._follow(True)
        self.move_cursor(self.row_count() - 1)

    def action_toggle_time(self) -> None:
        self.absolute_time = not self.absolute_time
