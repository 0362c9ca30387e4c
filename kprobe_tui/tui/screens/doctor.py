"""The doctor's findings as a screen: what this kernel and this user allow, as ``kprobe-tui doctor`` says it.

Read off the UI thread (it reads tracefs, kallsyms and BTF, and may ask a debuginfod server); the text
wraps and scrolls, so no finding is cut at 80 columns.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Static

from kprobe_tui.doctor import report
from kprobe_tui.kernel.sources import KernelSources
from kprobe_tui.tui.navigation import Back
from kprobe_tui.tui.plain import plain
from kprobe_tui.tui.theming import LAYOUT
from kprobe_tui.tui.widgets.key_footer import KeyFooter
from kprobe_tui.tui.work import Background


class DoctorScreen(Screen):
    CSS_PATH = LAYOUT
    AUTO_FOCUS = "#doctor"
    BINDINGS = [Binding("escape", "back", "Back")]

    def __init__(self, sources: KernelSources, binary: str | None = None) -> None:
        """``binary``: the program browsed with -x, whose probing is reported too."""
        super().__init__()
        self.sources = sources
        self.binary = binary
        self.work = Background(self)

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="doctor"):
            yield Static("asking the kernel…", id="findings")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.work.run("doctor", report, self.sources, self.binary, then=self._show)

    def _show(self, text: str) -> None:
        self.query_one("#findings", Static).update(plain(text))  # kernel notes and paths: text, never markup

    def action_back(self) -> None:
        self.post_message(Back())
