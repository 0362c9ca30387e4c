"""A flame graph as an icicle (the root at the top) on Textual's Line API: one row per stack depth.

The layout is ``stream.flame.FlameLayout``'s, made once per data set; a row is painted from the frames
it says fill its columns at this width and zoom, so only what is on screen costs anything, and no
widget exists per frame (10k stacks are ~20k-150k frames). Frame names are the traced kernel's or
program's text: escaped (``printable``) and cut to their frame by cell width, never markup.
"""

from __future__ import annotations

import zlib
from functools import lru_cache
from typing import ClassVar

from rich.cells import cell_len, set_cell_size
from rich.color import Color
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from kprobe_tui.stream.flame import ROOT, Cell, FlameLayout, Zoom
from kprobe_tui.textsafe import printable

MATCH = Style(color="black", bgcolor=Color.from_rgb(200, 110, 235))  # flamegraph.pl's search colour
CURSOR = Style(bold=True, reverse=True)


@lru_cache(4096)
def frame_style(name: str) -> Style:
    """flamegraph.pl's "hot" palette, chosen by the name (crc32: the same colour in every run, unlike hash())."""
    mix = zlib.crc32(name.encode("utf-8", "surrogateescape"))
    red = 205 + (mix & 0x3F) * 50 // 0x3F
    green = ((mix >> 6) & 0xFF) * 230 // 0xFF
    blue = ((mix >> 14) & 0x3F) * 55 // 0x3F
    return Style(color="black", bgcolor=Color.from_rgb(red, green, blue))


def label(name: str, width: int) -> str:
    """``name`` escaped and cut to ``width`` cells, ``…`` where it was cut; none in a frame of 1-2 cells (a
    letter or two there read as noise, its colour shows it)."""
    if width <= 2:
        return " " * width
    if name.isascii() and name.isprintable():  # a symbol: a character a cell (rich's cell sizing took 7x as long)
        return name.ljust(width) if len(name) <= width else name[: width - 1] + "…"
    shown = printable(name[: 4 * width])  # a hostile name may be a megabyte: cut before escaping
    if cell_len(shown) <= width and len(name) <= 4 * width:
        return set_cell_size(shown, width)
    return set_cell_size(shown, width - 1) + "…"


class FlameView(ScrollView, can_focus=True):
    """The frames of ``flame`` filling the width; the cursor is on one frame, ``zoom`` puts one over the width."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("left,h", "sibling(-1)", "Left", show=False),
        Binding("right,l", "sibling(1)", "Right", show=False),
        Binding("up,k", "caller", "Caller", show=False),
        Binding("down,j", "callee", "Callee", show=False),
        Binding("enter", "zoom_in", "Zoom"),
        Binding("escape,backspace", "zoom_out", "Zoom out"),
    ]

    class Changed(Message):
        """The cursor, the zoom or the search changed: what the status line says."""

    class ZoomedOut(Message):
        """Escape with nothing to zoom out of: the screen's to close."""

    def __init__(self, flame: FlameLayout, **kwargs) -> None:
        super().__init__(**kwargs)
        self.show(flame)

    def show(self, flame: FlameLayout) -> None:
        """Another data set: the whole graph, the cursor on ``all``."""
        self.flame = flame
        self.cursor = ROOT
        self.zooms: list[Zoom] = [flame.zoom()]  # the last is shown; escape goes back one
        self.matches: set[int] = set()
        self.matched = 0  # the count under the matches (each once)
        self._cells: dict[int, list[Cell]] = {}  # by depth, for the current width and zoom
        self._cells_for: tuple[int, Zoom] | None = None
        if self.is_mounted:
            self.virtual_size = Size(0, flame.depth)
            self.scroll_to(y=0, animate=False, immediate=True)
            self.refresh()

    @property
    def zoomed(self) -> Zoom:
        return self.zooms[-1]

    @property
    def columns(self) -> int:
        return self.scrollable_content_region.width

    def on_mount(self) -> None:
        self.virtual_size = Size(0, self.flame.depth)

    def row_cells(self, depth: int) -> list[Cell]:
        """The frames drawn on row ``depth`` now (kept until the width or the zoom changes)."""
        key = (self.columns, self.zoomed)
        if self._cells_for != key:
            self._cells, self._cells_for = {}, key
        cells = self._cells.get(depth)
        if cells is None:
            cells = self._cells[depth] = self.flame.cells(depth, self.columns, self.zoomed)
        return cells

    def render_line(self, y: int) -> Strip:
        depth = int(self.scroll_offset.y) + y
        width, base = self.columns, self.rich_style
        segments = []
        at = 0
        for first, end, frame in self.row_cells(depth):
            if first > at:
                segments.append(Segment(" " * (first - at), base))
            name = self.flame.name(frame)
            style = MATCH if frame in self.matches else frame_style(name)
            if frame == self.cursor:
                style += CURSOR
            segments.append(Segment(label(name, end - first), style))  # its own colours: the view's add nothing
            at = end
        if at < width:
            segments.append(Segment(" " * (width - at), base))
        return Strip(segments, width)

    # --- the cursor -------------------------------------------------------------------------------------

    def select(self, frame: int) -> None:
        """Put the cursor on ``frame`` and its row in view."""
        self.cursor = frame
        depth = self.flame.depth_of(frame)
        self._scroll_to_depth(depth)
        self.refresh()
        self.post_message(self.Changed())

    def _scroll_to_depth(self, depth: int) -> None:
        top, height = int(self.scroll_offset.y), max(1, self.scrollable_content_region.height)
        if depth < top:
            self.scroll_to(y=depth, animate=False, immediate=True)
        elif depth >= top + height:
            self.scroll_to(y=depth - height + 1, animate=False, immediate=True)

    def _shown(self, frame: int) -> bool:
        return any(cell.frame == frame for cell in self.row_cells(self.flame.depth_of(frame)))

    def action_sibling(self, direction: int) -> None:
        """The next frame drawn to the left or right on the cursor's row."""
        cells = self.row_cells(self.flame.depth_of(self.cursor))
        at = next((index for index, cell in enumerate(cells) if cell.frame == self.cursor), None)
        if at is not None and 0 <= at + direction < len(cells):
            self.select(cells[at + direction].frame)

    def action_caller(self) -> None:
        parent = self.flame.parent(self.cursor)
        if parent >= 0:
            self.select(parent)

    def action_callee(self) -> None:
        """The widest callee drawn (down is where the time goes)."""
        drawn = {cell.frame for cell in self.row_cells(self.flame.depth_of(self.cursor) + 1)}
        callees = [child for child in self.flame.children(self.cursor) if child in drawn]
        if callees:
            self.select(max(callees, key=self.flame.count))

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)  # None on a scrollbar
        if offset is None:
            return
        depth = int(self.scroll_offset.y) + offset.y
        frame = next((cell.frame for cell in self.row_cells(depth) if cell.first <= offset.x < cell.end), None)
        if frame is not None:
            self.select(frame)
            if event.chain >= 2:
                self.action_zoom_in()

    # --- zoom and search --------------------------------------------------------------------------------

    def action_zoom_in(self) -> None:
        """The cursor's frame over the full width (its callers above it, full width too)."""
        if self.cursor != self.zoomed.frame:
            self.zooms.append(self.flame.zoom(self.cursor))
            self.refresh()
            self.post_message(self.Changed())

    def action_zoom_out(self) -> None:
        """Back to the zoom before; at the whole graph, the screen's escape."""
        if len(self.zooms) == 1:
            self.post_message(self.ZoomedOut())
            return
        left = self.zooms.pop()
        self.refresh()
        self.select(self.cursor if self._shown(self.cursor) else left.frame)

    def search(self, text: str) -> None:
        """Frames whose name holds ``text`` stand out; an empty text clears it."""
        self.matches = self.flame.matches(text)
        self.matched = self.flame.matched_count(self.matches)
        self.refresh()
        self.post_message(self.Changed())
