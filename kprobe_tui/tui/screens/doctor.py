"""The doctor's findings as a screen: what this kernel and this user allow, as ``kprobe-tui doctor`` says it.

Read off the UI thread (it reads tracefs, kallsyms and BTF, and may ask a debuginfod server); the text
is folded to the screen's width with each finding's detail indented under its name, and scrolls, so no
finding is cut at 80 columns and none runs into the column of names.
"""

from __future__ import annotations

import re
import textwrap

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

FINDING = re.compile(r"(?P<head> *\[..\] .*?) {2,}(?P<detail>\S.*)")  # "  [ok] label    detail"
NAMES_BESIDE = 100  # narrower than this, a finding's detail goes under its name


def fold(text: str, width: int) -> str:
    """The report at ``width`` columns: wrapped lines indented under their own line's start."""
    out = []
    for line in text.splitlines():
        finding = FINDING.fullmatch(line)
        if finding and width < NAMES_BESIDE:
            indent = " " * (len(finding["head"]) - len(finding["head"].lstrip()) + 5)
            out.append(finding["head"])
            out.extend(textwrap.wrap(finding["detail"], width, initial_indent=indent, subsequent_indent=indent))
            continue
        indent = " " * (finding.start("detail") if finding else len(line) - len(line.lstrip()) + 2)
        out.extend(textwrap.wrap(line, width, subsequent_indent=indent) or [""])
    return "\n".join(out)


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
        self.text = ""

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="doctor"):
            yield Static("asking the kernel…", id="findings")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.work.run("doctor", report, self.sources, self.binary, then=self._show)

    def _show(self, text: str) -> None:
        self.text = text
        self._fold()

    def on_resize(self) -> None:
        self._fold()

    def _fold(self) -> None:
        if self.text:
            findings = self.query_one("#findings", Static)
            width = max(20, self.size.width - 4)  # the findings' padding and the scroll bar, shown or not
            findings.update(plain(fold(self.text, width)))  # kernel notes and paths: text, never markup

    def action_back(self) -> None:
        self.post_message(Back())
