"""A source file on Textual's Line API, probeable lines numbered and highlighted as `perf probe -L`.

Only the visible rows are rendered, so a 3,000-line kernel file scrolls as fast as a short one.
A click moves the cursor; a click on a probeable line's number, or a double click on its text,
asks for a probe there (the mouse twin of Enter).
"""

from __future__ import annotations

from typing import ClassVar

from rich.segment import Segment
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from kprobe_tui.textsafe import printable

NUMBER_WIDTH = 9  # perf's "%7d  " column


class SourceView(ScrollView, can_focus=True):
    """Rows are source lines (1-based); probeable ones carry perf's number relative to ``number_base``.

    The cursor is a reactive: a move repaints the two lines whose look changed, not the view (a
    scroll repaints all of it by itself).
    """

    COMPONENT_CLASSES: ClassVar[set[str]] = {"source-view--probeable", "source-view--number", "source-view--cursor",
                         "source-view--dim"}
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up,k", "move(-1)", "Up", show=False),
        Binding("down,j", "move(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("n", "next_probeable(1)", "Next probeable"),
        Binding("p", "next_probeable(-1)", "Previous probeable"),
    ]

    class CursorMoved(Message):
        """The cursor is on a new source line (absolute, 1-based)."""

        def __init__(self, line: int, probeable: bool) -> None:
            super().__init__()
            self.line = line
            self.probeable = probeable

    class ProbeRequested(Message):
        """A click on a probeable line's number, or a double click on the line (absolute, 1-based)."""

        def __init__(self, line: int) -> None:
            super().__init__()
            self.line = line

    cursor: reactive[int] = reactive(1, repaint=False, init=False)

    def watch_cursor(self, previous: int, cursor: int) -> None:
        top, height = int(self.scroll_offset.y), self.scrollable_content_region.height
        for line in (previous, cursor):
            if top < line <= min(top + height, len(self.texts)):  # on screen (else a scroll follows)
                self.refresh_line(line - 1)  # a line of the virtual canvas

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.texts: list[str] = []
        self.probeable: set[int] = set()
        self.number_base = 0
        self._centre_pending = False

    def show(self, texts: list[str], probeable: set[int], offset: int, cursor: int) -> None:
        """Show a file (lines without endings) and put the cursor on ``cursor``."""
        # the file's text, not ours: every control escaped once here, not per frame
        self.texts = [printable(text.rstrip("\r\n").expandtabs(8)) for text in texts]
        self.probeable = probeable
        self.number_base = offset
        widest = max((len(text) for text in self.texts), default=0)
        self.virtual_size = Size(widest + NUMBER_WIDTH, len(self.texts))
        self.cursor = 0
        self._move_to(cursor)
        # centred once the new virtual size is laid out (before that, scrolling is clamped to the old
        # one), and again on a resize until the user moves
        self._centre_pending = True
        self.call_after_refresh(self._scroll_to_cursor, True)
        self.refresh()

    def on_resize(self) -> None:
        if self._centre_pending:
            self._scroll_to_cursor(True)

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        line = scroll_y + y + 1
        width = self.scrollable_content_region.width
        base = self.rich_style
        if line > len(self.texts):
            return Strip.blank(width, base)
        if line == self.cursor:
            base = base + self.get_component_rich_style("source-view--cursor", partial=True)
        if line in self.probeable:
            number = Segment(f"{line - self.number_base:7d}  ",
                             base + self.get_component_rich_style("source-view--number", partial=True))
            text_style = base + self.get_component_rich_style("source-view--probeable", partial=True)
        else:
            number = Segment(" " * NUMBER_WIDTH, base)
            text_style = base + self.get_component_rich_style("source-view--dim", partial=True)
        strip = Strip([number, Segment(self.texts[line - 1], text_style)])
        return strip.extend_cell_length(scroll_x + width, base).crop(scroll_x, scroll_x + width)

    def _move_to(self, line: int) -> None:
        self._centre_pending = False
        if not self.texts:
            return
        line = max(1, min(line, len(self.texts)))
        if line == self.cursor:
            return
        self.cursor = line
        self._scroll_to_cursor()
        self.post_message(self.CursorMoved(line, line in self.probeable))

    def _scroll_to_cursor(self, center: bool = False) -> None:
        """The cursor's row in view: a third from the top when ``center``, else scrolled just enough."""
        line, height = self.cursor, max(1, self.scrollable_content_region.height)
        top = int(self.scroll_offset.y)
        if center:
            self.scroll_to(y=max(0, line - 1 - height // 3), animate=False, immediate=True)
        elif line - 1 < top:
            self.scroll_to(y=line - 1, animate=False, immediate=True)
        elif line - 1 >= top + height:
            self.scroll_to(y=line - height, animate=False, immediate=True)

    def action_move(self, delta: int) -> None:
        self._move_to(self.cursor + delta)

    def action_page(self, direction: int) -> None:
        self._move_to(self.cursor + direction * max(1, self.scrollable_content_region.height - 1))

    def action_next_probeable(self, direction: int) -> None:
        candidates = sorted(self.probeable)
        later = [n for n in candidates if (n - self.cursor) * direction > 0]
        if later:
            self._move_to(later[0] if direction > 0 else later[-1])

    def on_click(self, event: events.Click) -> None:
        line = int(self.scroll_offset.y) + event.y + 1
        if not self.texts or line > len(self.texts):
            return
        self._move_to(line)
        on_number = int(self.scroll_offset.x) + event.x < NUMBER_WIDTH
        if line in self.probeable and (on_number or event.chain >= 2):
            self.post_message(self.ProbeRequested(line))
