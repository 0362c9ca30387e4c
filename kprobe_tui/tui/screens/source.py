"""A function's source with its probeable lines, and the variables of the line under the cursor.

The DWARF work runs in worker threads (a kernel unit takes a fraction of a second); the screen
only shows what the debuginfo core returns, or its UserError in plain words.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Static

from kprobe_tui.debuginfo.describe import format_points
from kprobe_tui.debuginfo.lines import LineSpec, find_line_range, source_text
from kprobe_tui.debuginfo.scope import DebugInfo, ProbeSpec, open_debuginfo
from kprobe_tui.errors import UserError
from kprobe_tui.tui.widgets.source_view import SourceView


@dataclass(frozen=True)
class DebugTarget:
    """Whose debug info to read: a user binary (-x), a vmlinux (-k), or the running kernel's."""

    binary: str | None = None
    vmlinux: str | None = None
    source_dir: str | None = None

    def open(self) -> DebugInfo:
        return open_debuginfo(binary=self.binary, vmlinux=self.vmlinux, source_dir=self.source_dir)


class SourceScreen(Screen):
    """Opened from the function browser with (debug-info target, function name)."""

    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("enter", "probe_line", "Probe this line"),
        Binding("v", "toggle_verbose", "Where vars live"),
    ]
    DEFAULT_CSS = """
    SourceScreen #source-title { height: auto; padding: 0 1; background: $boost; }
    SourceScreen #source-body { height: 1fr; }
    SourceScreen SourceView { width: 2fr; }
    SourceScreen #vars-pane { width: 1fr; min-width: 30; border-left: solid $primary; padding: 0 1; }
    """

    class ProbeLine(Message):
        """Enter on a probeable line: build a probe there (``line`` counts from the function's first line)."""

        def __init__(self, function: str, line: int) -> None:
            super().__init__()
            self.function = function
            self.line = line

    def __init__(self, target: DebugTarget, function: str) -> None:
        super().__init__()
        self.target = target
        self.function = function
        self.info: DebugInfo | None = None
        self.decl_line = 0
        self.verbose = False
        self.cursor_line = 0
        # pyelftools reads through shared stream positions: one DWARF question at a time, even
        # when a quick cursor leaves an earlier (uncancellable) thread worker still running
        self._dwarf_lock = threading.Lock()

    def compose(self) -> ComposeResult:
        yield Static(f"Loading the debug info of {self.function}…", id="source-title")
        with Horizontal(id="source-body"):
            yield SourceView(id="source")
            with VerticalScroll(id="vars-pane"):
                yield Static("", id="vars", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        self.load()

    @work(thread=True, exclusive=True, group="source")
    def load(self) -> None:
        try:
            info = self.target.open()
            found = find_line_range(info, LineSpec.parse(self.function))
            text = source_text(info, found)
        except UserError as error:
            self.app.call_from_thread(self._show_error, str(error))
            return
        self.app.call_from_thread(self._show_source, info, found, text)

    def _show_error(self, message: str) -> None:
        self.query_one("#source-title", Static).update(f"No source view for {self.function}: {message}")

    def _show_source(self, info, found, text) -> None:
        self.info, self.decl_line = info, found.offset
        title = f"{self.function} in {text.path}  ({len(found.lines)} probeable lines: n/p to jump, v for details)"
        if text.note:
            title += f"\n{text.note}"
        self.query_one("#source-title", Static).update(title)
        view = self.query_one(SourceView)
        if text.lines is None:  # no source text: the numbers alone, still probeable
            last = max(found.lines, default=0)
            lines = ["(source text not available)" if n in found.lines else "" for n in range(1, last + 1)]
        else:
            lines = text.lines
        first = min(found.lines, default=found.start)
        view.show(lines, set(found.lines), found.offset, cursor=first)
        view.focus()

    @on(SourceView.CursorMoved)
    def _cursor_moved(self, message: SourceView.CursorMoved) -> None:
        self.cursor_line = message.line
        if not message.probeable:
            self.query_one("#vars", Static).update(
                f"Line {message.line} has no probe point of its own.\nn / p jump to the next probeable line.")
            return
        self.query_one("#vars", Static).update("Reading variables…")
        self.load_variables(message.line)

    @work(thread=True, exclusive=True, group="vars")
    def load_variables(self, line: int) -> None:
        spec = ProbeSpec(self.function, line=line - self.decl_line)
        with self._dwarf_lock:
            if line != self.cursor_line:
                return  # the cursor moved on while we waited
            try:
                text = format_points(spec, self.info.probe_points(spec), verbose=self.verbose)
            except UserError as error:
                text = str(error)
        self.app.call_from_thread(self._show_variables, line, text)

    def _show_variables(self, line: int, text: str) -> None:
        if line == self.cursor_line:
            self.query_one("#vars", Static).update(text.expandtabs(4))

    def action_probe_line(self) -> None:
        """The builder, set up for a line probe here (numbered from the function's first line, as perf -L)."""
        if self.info is None or self.cursor_line not in self.query_one(SourceView).probeable:
            self.notify("This line has no probe point of its own: n / p jump to one that has.", severity="warning")
            return
        self.post_message(self.ProbeLine(self.function, self.cursor_line - self.decl_line))

    def action_toggle_verbose(self) -> None:
        self.verbose = not self.verbose
        if self.info is not None and self.cursor_line in self.query_one(SourceView).probeable:
            self.load_variables(self.cursor_line)
