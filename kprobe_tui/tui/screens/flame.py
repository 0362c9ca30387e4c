"""Where the counted stacks go, as a flame graph (an icicle: the callers at the top, widths by count).

The stacks come from the statistics view keyed by stack (or a file, in tests and pictures). Enter zooms
into the frame under the cursor, escape zooms back out (and at the whole graph goes back), ``/`` finds
frames by a part of their name, ``s`` opens the frame's function's source (so the next probe is one
step away). The status line says the frame's name, its count and its share of all and of the zoom.
"""

from __future__ import annotations

import re

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Input, Static

from kprobe_tui.stream.flame import ROOT, FlameLayout
from kprobe_tui.stream.stacks import StackCounts, frame_symbol
from kprobe_tui.textsafe import printable
from kprobe_tui.tui.navigation import Back, OpenSource
from kprobe_tui.tui.plain import plain
from kprobe_tui.tui.theming import LAYOUT
from kprobe_tui.tui.widgets.filter_bar import FilterBar
from kprobe_tui.tui.widgets.flame import FlameView
from kprobe_tui.tui.widgets.key_footer import KeyFooter

C_SYMBOL = re.compile(r"[A-Za-z_][\w.]*")  # with a compiler's suffix: p9_client_zc_rpc.constprop.0
STATUS_NAME = 200  # characters of a frame's name in the status line (a hostile one may be a megabyte)


def frame_function(frame: str) -> str | None:
    """The function of a frame (``vfs_read+0x5 [ext4]``: ``vfs_read``); None when it names none (an
    address, ``[unknown]``, a program's ``/path[+0x10]``, a ``file:line``)."""
    function = frame_symbol(frame)
    return function if C_SYMBOL.fullmatch(function) else None


class OpenFlame(Message):
    """The flame graph of ``stacks``; ``title`` says what was counted. Posted to the app (navigation.py's way)."""

    def __init__(self, stacks: StackCounts, title: str) -> None:
        super().__init__()
        self.stacks = stacks
        self.title = title


class FlameScreen(Screen):
    CSS_PATH = LAYOUT
    AUTO_FOCUS = "FlameView"
    DEFAULT_CSS = """
    FlameScreen #flame-title { height: 1; padding: 0 1; background: $panel; text-wrap: nowrap; text-overflow: ellipsis; }
    FlameScreen FlameView { height: 1fr; }
    FlameScreen #flame-status { height: 1; padding: 0 1; background: $panel; text-wrap: nowrap; text-overflow: ellipsis; }
    """
    BINDINGS = [
        Binding("slash", "search", "Search"),
        Binding("s", "source", "Source"),
        Binding("escape", "back", "Back", show=False),  # from the search box; the graph's own zooms out first
    ]

    def __init__(self, stacks: StackCounts, title: str) -> None:
        """``title``: what was counted (``vfs_read`` by kernel stack, ...)."""
        super().__init__()
        self.flame = FlameLayout(stacks)
        self.title_text = title

    def compose(self) -> ComposeResult:
        yield Static(plain(self.title_text[:STATUS_NAME]), id="flame-title")
        yield FilterBar("a part of a frame's name: its frames stand out", "", note_id="flame-matches")
        yield FlameView(self.flame)
        yield Static("", id="flame-status")
        yield KeyFooter()

    def on_mount(self) -> None:
        self._status()

    @property
    def view(self) -> FlameView:
        return self.query_one(FlameView)

    def _status(self) -> None:
        view, flame = self.view, self.flame
        frame, zoom = view.cursor, view.zoomed.frame
        name = flame.name(frame)
        name = name if len(name) <= STATUS_NAME else name[:STATUS_NAME] + "…"
        text = f"{name} · {flame.count(frame):,} ({flame.share(frame):.1%} of all"
        if zoom != ROOT:
            text += f", {flame.share(frame, zoom):.1%} of {flame.name(zoom)[:STATUS_NAME]}"
        self.query_one("#flame-status", Static).update(plain(text + ")"))
        note = f"{len(view.matches):,} frames, {view.matched / flame.total:.1%}" if view.matches and flame.total else ""
        self.query_one(FilterBar).note(note)

    @on(FlameView.Changed)
    def _changed(self) -> None:
        self._status()

    @on(FlameView.ZoomedOut)
    def _zoomed_out(self) -> None:
        self.post_message(Back())

    def action_search(self) -> None:
        self.query_one(FilterBar).focus_now()

    @on(Input.Changed, "#filter")
    def _search_changed(self, message: Input.Changed) -> None:
        self.view.search(message.value.strip())

    @on(Input.Submitted, "#filter")
    def _search_submitted(self) -> None:
        self.set_focus(self.view)

    def action_source(self) -> None:
        name = self.flame.name(self.view.cursor)
        function = frame_function(name) if self.view.cursor != ROOT else None
        if function is None:
            self.notify(printable(f"{name[:STATUS_NAME]} names no function: choose a frame of one"), severity="warning",
                        markup=False)
            return
        self.post_message(OpenSource(function))

    def action_back(self) -> None:
        if not self.view.has_focus:
            self.set_focus(self.view)
        else:
            self.post_message(Back())
