"""A debuginfod download in progress: what, from where, a bar, bytes, rate, time left, how to cancel.

It only renders the ``Progress`` reports the debuginfod client sends (debuginfo/debuginfod.py);
the screen that started the download owns the transfer and its cancel. Names come from a server
and from DWARF: they are shown as plain text, never as markup.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import ProgressBar, Static

from kprobe_tui.debuginfo.debuginfod import Progress


class DownloadBar(Vertical):

    report: Progress | None = None  # the last one shown

    def compose(self) -> ComposeResult:
        yield Static("", id="download-what")
        yield ProgressBar(show_eta=False, id="download-bar")
        yield Static("", id="download-numbers")

    def show(self, progress: Progress) -> None:
        self.report = progress
        self.display = True
        self.query_one("#download-what", Static).update(
            Text(f"Downloading the {progress.what} from {progress.host}"))
        bar = self.query_one(ProgressBar)
        bar.update(total=progress.total, progress=progress.done)
        self.query_one("#download-numbers", Static).update(Text(f"{progress.numbers}    escape: cancel"))

    def hide(self) -> None:
        self.display = False
