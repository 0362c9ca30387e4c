"""A list of 100k function names on Textual's Line API: only the visible rows are ever rendered."""

from __future__ import annotations

from collections.abc import Callable

from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.strip import Strip

from kprobe_tui.kernel.catalog import Status
from kprobe_tui.matching import Matcher
from kprobe_tui.textsafe import printable
from kprobe_tui.tui.widgets.cursor_view import CursorView

STATUS_GLYPH = {
    Status.FTRACE: "●",
    Status.BREAKPOINT: "◆",
    Status.PROBEABLE: "○",
    Status.CLONE: "◇",
    Status.AMBIGUOUS: "≈",
    Status.BLACKLISTED: "✕",
    Status.HIDDEN: "?",
    Status.FREED: "⊘",
    Status.NO_KPROBES: "–",
}


class FunctionList(CursorView):
    """Rows are names; the owner supplies each name's status and module through callbacks."""

    COMPONENT_CLASSES = {
        "function-list--cursor",
        "function-list--match",
        "function-list--module",
        *(f"function-list--{status.value}" for status in Status),
    }
    BINDINGS = [Binding("end", "jump(-1)", "Last", show=False), Binding("enter", "select", "Source")]

    class Highlighted(Message):
        """The cursor is on a new function (or on none: ``name`` is None)."""

        def __init__(self, name: str | None) -> None:
            super().__init__()
            self.name = name

    class Selected(Message):
        """Enter or a double click on a function."""

        def __init__(self, name: str) -> None:
            super().__init__()
            self.name = name

    def __init__(self, classify: Callable[[str], Status], module_of: Callable[[str], str], **kwargs) -> None:
        super().__init__(**kwargs)
        self._classify = classify
        self._module_of = module_of
        self.rows: list[str] = []
        self.matcher: Matcher | None = None

    def set_rows(self, rows: list[str], matcher: Matcher | None) -> None:
        """Show a new result, keeping the cursor on the same name when it is still there."""
        current = self.current
        self.rows = rows
        self.matcher = matcher
        widest = max((len(name) for name in rows[:2000]), default=0) + 24
        self.virtual_size = Size(widest, len(rows))
        index = 0
        if current is not None and rows and len(rows) < 50000:
            try:
                index = rows.index(current)
            except ValueError:
                pass
        self.cursor = -1  # a new result: always announce the row under the cursor
        self.refresh()  # every row may be another (the virtual size, when it changes, repaints only then)
        self.move_cursor(index)

    @property
    def current(self) -> str | None:
        return self.rows[self.cursor] if 0 <= self.cursor < len(self.rows) else None

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        index = scroll_y + y
        width = self.scrollable_content_region.width
        if index >= len(self.rows):
            return Strip.blank(width, self.rich_style)
        name = self.rows[index]
        status = self._classify(name)
        base = self.rich_style
        if index == self.cursor:
            base = base + self.get_component_rich_style("function-list--cursor", partial=True)
        status_style = self.get_component_rich_style(f"function-list--{status.value}", partial=True)
        segments = [Segment(f" {STATUS_GLYPH[status]} ", base + status_style)]
        segments.extend(self._name_segments(name, base + status_style))
        module = self._module_of(name)
        if module:
            segments.append(Segment(f"  [{printable(module)}]",
                                    base + self.get_component_rich_style("function-list--module", partial=True)))
        strip = Strip(segments).extend_cell_length(scroll_x + width, base)
        return strip.crop(scroll_x, scroll_x + width)

    def _name_segments(self, name: str, style: Style) -> list[Segment]:
        """The name, its matches highlighted; each piece escaped on its own (an ELF symbol name may hold
        any byte but NUL, ESC included), so the match spans, found in the real name, stay right."""
        spans = self.matcher.spans(name) if self.matcher else []
        if not spans:
            return [Segment(printable(name), style)]
        match_style = style + self.get_component_rich_style("function-list--match", partial=True)
        segments, at = [], 0
        for start, end in spans:
            if start > at:
                segments.append(Segment(printable(name[at:start]), style))
            segments.append(Segment(printable(name[start:end]), match_style))
            at = end
        if at < len(name):
            segments.append(Segment(printable(name[at:]), style))
        return segments

    # --- cursor -------------------------------------------------------------------------------

    def row_count(self) -> int:
        return len(self.rows)

    def cursor_moved(self, previous: int) -> None:
        if self.cursor != previous:
            self.post_message(self.Highlighted(self.current))

    def action_select(self) -> None:
        if self.current is not None:
            self.post_message(self.Selected(self.current))

    row_chosen = action_select
