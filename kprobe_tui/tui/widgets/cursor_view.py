"""A Line API view with a row cursor: the keys, clicks and scrolling every big list here shares."""

from __future__ import annotations

from textual import events
from textual.binding import Binding
from textual.reactive import reactive
from textual.scroll_view import ScrollView


class CursorView(ScrollView, can_focus=True):
    """Rows ``0..row_count()-1`` drawn below ``header_lines`` fixed lines; subclasses render them.

    ``cursor_moved(previous)`` runs after every move, so a subclass can post its own message.
    The cursor is a reactive: a move repaints the two rows whose look changed, not the view (a
    scroll repaints all of it by itself; new rows are the subclass's to repaint).
    """

    BINDINGS = [
        Binding("up,k", "move(-1)", "Up", show=False),
        Binding("down,j", "move(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "jump(0)", "First", show=False),
    ]
    header_lines = 0
    cursor: reactive[int] = reactive(0, repaint=False, init=False)

    def watch_cursor(self, previous: int, cursor: int) -> None:
        top = int(self.scroll_offset.y)
        for row in (previous, cursor):
            if top <= row < min(top + self.page_height, self.row_count()):  # on screen (else a scroll follows)
                self.refresh_line(row + self.header_lines)  # a line of the virtual canvas, below the header

    def row_count(self) -> int:
        raise NotImplementedError

    def cursor_moved(self, previous: int) -> None:
        """Called after the cursor moved (or the rows changed under it)."""

    @property
    def page_height(self) -> int:
        return max(1, self.scrollable_content_region.height - self.header_lines)

    def move_cursor(self, index: int) -> None:
        """Put the cursor on row ``index`` (clamped) and scroll it into view."""
        previous = self.cursor
        self.cursor = max(0, min(index, self.row_count() - 1))
        top = int(self.scroll_offset.y)
        if self.cursor < top:
            self.scroll_to(y=self.cursor, animate=False, immediate=True)
        elif self.cursor >= top + self.page_height:
            self.scroll_to(y=self.cursor - self.page_height + 1, animate=False, immediate=True)
        self.cursor_moved(previous)

    def action_move(self, delta: int) -> None:
        self.move_cursor(self.cursor + delta)

    def action_page(self, direction: int) -> None:
        self.action_move(direction * max(1, self.page_height - 1))

    def action_jump(self, index: int) -> None:
        self.move_cursor(index if index >= 0 else self.row_count() - 1)

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)  # None on the border or a scrollbar
        if offset is None or offset.y < self.header_lines:
            return
        index = int(self.scroll_offset.y) + offset.y - self.header_lines
        if 0 <= index < self.row_count():
            self.action_move(index - self.cursor)  # a click is a move, for subclasses that track moves
            if event.chain >= 2:
                self.row_chosen()

    def row_chosen(self) -> None:
        """A double click on the cursor's row (subclasses: what Enter does)."""
