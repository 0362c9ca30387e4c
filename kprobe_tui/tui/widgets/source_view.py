"""A source file on Textual's Line API, probeable lines numbered and highlighted as `perf probe -L`.

Only the visible rows are rendered, so a 3,000-line kernel file scrolls as fast as a short one.
"""

from __future__ import annotations

from rich.segment import Segment
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

NUMBER_WIDTH = 9  # perf's "%7d  " column


class SourceView(ScrollView, can_focus=True):
    """Rows are source lines (1-based); probeable ones carry perf's number relative to ``number_base``."""

    COMPONENT_CLASSES = {"source-view--probeable", "source-view--number", "source-view--cursor",
                         "source-view--dim"}
    DEFAULT_CSS = """
    SourceView > .source-view--probeable { color: $text; text-style: bold; }
    SourceView > .source-view--number { color: $success; text-style: bold; }
    SourceView > .source-view--dim { color: $text-muted; }
    SourceView > .source-view--cursor { background: $primary 40%; }
    SourceView:focus > .source-view--cursor { background: $primary 65%; }
    """
    BINDINGS = [
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

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.texts: list[str] = []
        self.probeable: set[int] = set()
        self.number_base = 0
        self.cursor = 1

    def show(self, texts: list[str], probeable: set[int], offset: int, cursor: int) -> None:
        """Show a file (lines without endings) and put the cursor on ``cursor``."""
        self.texts = [text.rstrip("\r\n").expandtabs(8) for text in texts]
        self.probeable = probeable
        self.number_base = offset
        widest = max((len(text) for text in self.texts), default=0)
        self.virtual_size = Size(widest + NUMBER_WIDTH, len(self.texts))
        self.cursor = 0
        self._move_to(cursor, center=True)
        self.refresh()

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

    def _move_to(self, line: int, center: bool = False) -> None:
        if not self.texts:
            return
        line = max(1, min(line, len(self.texts)))
        if line == self.cursor:
            return
        previous, self.cursor = self.cursor, line
        height = max(1, self.scrollable_content_region.height)
        top = int(self.scroll_offset.y)
        if center:
            self.scroll_to(y=max(0, line - 1 - height // 3), animate=False, immediate=True)
        elif line - 1 < top:
            self.scroll_to(y=line - 1, animate=False, immediate=True)
        elif line - 1 >= top + height:
            self.scroll_to(y=line - height, animate=False, immediate=True)
        self.refresh_line(previous - 1 - top)
        self.refresh()
        self.post_message(self.CursorMoved(line, line in self.probeable))

    def action_move(self, delta: int) -> None:
        self._move_to(self.cursor + delta)

    def action_page(self, direction: int) -> None:
        self._move_to(self.cursor + direction * max(1, self.scrollable_content_region.height - 1))

    def action_next_probeable(self, direction: int) -> None:
        candidates = sorted(self.probeable)
        later = [n for n in candidates if (n - self.cursor) * direction > 0]
        if later:
            self._move_to(later[0] if direction > 0 else later[-1])
