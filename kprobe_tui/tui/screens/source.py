"""A function's source with its probeable lines, and the variables of the line under the cursor.

The DWARF work runs in workers (a kernel unit takes a fraction of a second: work.py); the screen
only shows what the debuginfo core returns. Without DWARF (the usual kernel: no debug vmlinux
installed) it falls back to the prototype from BTF, says in plain words what is missing, and
still offers entry and return probes, whose arguments BTF names. Debug info or source text that
comes from debuginfod shows a progress bar while it downloads (the rest of the app stays usable);
escape cancels it, and leaving the screen does too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from rich.style import Style
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Button, Static

from kprobe_tui.debuginfo.debuginfod import Cancel, Client, Progress
from kprobe_tui.debuginfo.describe import format_points
from kprobe_tui.debuginfo.lines import LineRange, LineSpec, SourceText, find_line_range, source_text
from kprobe_tui.debuginfo.locate import snapshot_debug_hint
from kprobe_tui.debuginfo.scope import DebugInfo, PointSpec, open_debuginfo
from kprobe_tui.errors import UserError
from kprobe_tui.textsafe import printable
from kprobe_tui.tui.navigation import Back, OpenBuilder
from kprobe_tui.tui.plain import plain
from kprobe_tui.tui.theming import LAYOUT
from kprobe_tui.tui.widgets.download_bar import DownloadBar
from kprobe_tui.tui.widgets.key_footer import KeyFooter
from kprobe_tui.tui.widgets.source_view import SourceView
from kprobe_tui.tui.work import Background

if TYPE_CHECKING:  # an annotation only: the builder's form (and its compiler) loads with the builder
    from kprobe_tui.probes.form import BuilderKind


@dataclass(frozen=True)
class DebugTarget:
    """Whose debug info to read: a user binary (-x), a loaded kernel module, a vmlinux (-k), or the running kernel's."""

    binary: str | None = None
    vmlinux: str | None = None
    source_dir: str | None = None
    module: str | None = None
    snapshot_of: str | None = None  # the release of a snapshot's kernel: not this machine's, so never looked for here

    def open(self, debuginfod=None) -> DebugInfo:
        if self.snapshot_of and not (self.binary or self.vmlinux):
            raise UserError(f"this is a snapshot of kernel {self.snapshot_of}, not the kernel running here: its debug "
                            "info is not looked for on this machine", snapshot_debug_hint(self.snapshot_of))
        return open_debuginfo(binary=self.binary, vmlinux=None if self.module else self.vmlinux,
                              source_dir=self.source_dir, module=self.module, debuginfod=debuginfod)


def clickable_variables(listing: str, capturable: set[str]) -> Text:
    """perf -V's listing with each capturable variable's name a link that captures it in the builder.

    A variable row is ``\\t\\t[mark]TYPE\\tNAME[\\tWHERE]`` (describe.format_points). Names and types
    are the debug info's: each field is shown escaped, and a link's action carries the real name as a
    Python literal (Textual reads action arguments with ast.literal_eval: data, never code)."""
    text = Text()
    for number, row in enumerate(listing.split("\n")):
        if number:
            text.append("\n")
        raw = row.split("\t")
        fields = [printable(field) for field in raw]
        start = len(text) + len("\t".join(fields[:3])) + 1
        text.append("\t".join(fields))
        if len(raw) > 3 and raw[0] == raw[1] == "" and raw[3] in capturable:
            link = Style(underline=True, meta={"@click": f"screen.probe_variable({raw[3]!r})"})
            text.stylize(link, start, start + len(fields[3]))
    text.expand_tabs(4)  # in place, keeping the links
    return text


class SourceScreen(Screen):
    """Opened from the function browser with (debug-info target, function name).

    ``symbol`` is the name probes attach to (a clone such as ``foo.isra.0`` shows ``foo``'s source);
    ``prototype`` is asked, off the UI thread, only when there is no DWARF to show."""

    CSS_PATH = LAYOUT
    AUTO_FOCUS = "SourceView"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back"),
        Binding("enter", "probe_here", "Probe"),
        Binding("r", "probe_function('return')", "Return"),
        Binding("a", "probe_all_variables", "All vars"),
        Binding("v", "toggle_verbose", "Where vars live"),
    ]
    def __init__(self, target: DebugTarget, function: str, *, symbol: str | None = None,
                 prototype: Callable[[], str | None] | None = None) -> None:
        super().__init__()
        self.target = target
        self.function = function
        self.symbol = symbol or function
        self._prototype = prototype
        self.info: DebugInfo | None = None
        self.fallback = False  # no DWARF: the prototype and Entry / Return instead of source
        self.decl_line = 0
        self.verbose = False
        self.cursor_line = 0
        self.capturable: list[str] = []  # the cursor line's variables perf can fetch
        self.work = Background(self)
        self._download = Cancel()  # set: the debuginfod transfer of load() stops at once
        self.downloading = False

    def compose(self) -> ComposeResult:
        yield Static(plain(f"Loading the debug info of {self.function}…"), id="source-title")
        yield DownloadBar(id="download")
        with Horizontal(id="source-body"):
            yield SourceView(id="source")
            with VerticalScroll(id="vars-pane"):
                yield Static("", id="vars")
        with Vertical(id="fallback"):
            yield Static("", id="prototype", markup=False)
            yield Static("", id="missing", markup=False)
            with Horizontal(id="kind-buttons"):
                yield Button("Entry probe", id="entry", variant="primary", compact=True)
                yield Button("Return probe", id="return", compact=True)
        yield KeyFooter()

    def on_mount(self) -> None:
        self.load()  # once: a screen popped back to keeps what it read

    def load(self) -> None:
        self.work.run("source", self._read, then=self._loaded, progress=self._show_download)

    def _read(self, progress: Callable[[Progress], None]) -> tuple[DebugInfo, LineRange, SourceText] | tuple[UserError, str | None]:
        """In a worker: the debug info (downloaded if need be), the function's lines and its source;
        or why not, and the prototype to show instead."""
        client = Client(progress=progress, cancel=self._download)
        try:
            info = self.target.open(debuginfod=client)
            found = find_line_range(info, LineSpec.parse(self.function))
            return info, found, source_text(info, found, debuginfod=client)
        except UserError as error:  # Cancelled too: what can still be probed, and that nothing was kept
            return error, self._prototype() if self._prototype is not None else None

    def _loaded(self, answer) -> None:
        if isinstance(answer[0], UserError):
            self._show_fallback(*answer)
        else:
            self._show_source(*answer)

    # --- debuginfod downloads ---------------------------------------------------------------------

    def _show_download(self, progress: Progress) -> None:
        self.downloading = not progress.finished and not self._download.is_set()
        if self.downloading:
            self.query_one(DownloadBar).show(progress)
        else:
            self.query_one(DownloadBar).hide()

    def action_back(self) -> None:
        """Escape: stop a download in progress (the screen then says so), else go back."""
        if self.downloading:
            self._download.set()
            self.downloading = False
            self.query_one(DownloadBar).hide()
            return
        self.post_message(Back())

    def on_unmount(self) -> None:
        self._download.set()  # nobody will look at what it brings

    # --- what is shown ------------------------------------------------------------------------------

    def _show_fallback(self, error: UserError, prototype: str | None) -> None:
        """What can still be probed without DWARF, and what would bring the source view."""
        self.downloading = False
        self.query_one(DownloadBar).hide()
        self.fallback = True
        kernel = self.target.binary is None
        self.query_one("#source-title", Static).update(plain(f"No source view for {self.function}: {error.message}"))
        self.query_one("#source-body").display = False
        self.query_one("#fallback").display = True
        if prototype:
            self.query_one("#prototype", Static).update(plain(prototype))
            where = "BTF" if kernel else "the symbol table and DWARF"
            still = (f"Entry and return probes still work, with the arguments by their names from {where} "
                     "(in the builder: a parameter, ptr->member, name:string) and $retval on return.")
        else:
            self.query_one("#prototype", Static).update(
                plain(f"{self.symbol}  ({'no prototype: not in BTF' if kernel else 'no debug info: registers only'})"))
            still = ("Entry and return probes still work, capturing registers (%di, %si, %dx, … or $arg1, $arg2, …) "
                     "and $retval on return.")
        hint = f"\n\nFor the source view and line probes: {error.hint}" if error.hint else ""
        self.query_one("#missing", Static).update(plain(f"{still}{hint}\n\nenter: entry probe   r: return probe   escape: back"))
        self.set_focus(self.query_one("#entry", Button))
        self.refresh_bindings()  # no variables to list or explain

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("probe_all_variables", "toggle_verbose"):
            return not self.fallback
        return True

    def _show_source(self, info, found, text) -> None:
        self.downloading = False
        self.query_one(DownloadBar).hide()
        self.info, self.decl_line = info, found.offset
        title = (f"{self.function}  {text.path}\n{len(found.lines)} probeable lines (n/p): enter or a click on "
                 "a number probes one, a click on a variable captures it")
        if text.note:
            title += f"\n{text.note}"
        self.query_one("#source-title", Static).update(plain(title))
        view = self.query_one(SourceView)
        if text.lines is None:  # no source text: the numbers alone, still probeable
            last = max(found.lines, default=0)
            lines = ["(source text not available)" if n in found.lines else "" for n in range(1, last + 1)]
        else:
            lines = text.lines
        first = min(found.lines, default=found.start)
        view.show(lines, set(found.lines), found.offset, cursor=first)
        self.set_focus(view)

    @on(SourceView.CursorMoved)
    def _cursor_moved(self, message: SourceView.CursorMoved) -> None:
        self.cursor_line = message.line
        self.capturable = []
        if not message.probeable:
            self.query_one("#vars", Static).update(
                f"Line {message.line} has no probe point of its own.\nn / p jump to the next probeable line.")
            return
        self.query_one("#vars", Static).update("Reading variables…")
        self.load_variables(message.line)

    def load_variables(self, line: int) -> None:
        """The line's variables, in a worker: a quicker cursor's newer line drops an older answer."""
        if self.info is not None:  # else no source is shown yet: no line has variables
            self.work.run("vars", self._variables_at, self.info, line, self.verbose, then=self._show_variables)

    def _variables_at(self, info: DebugInfo, line: int, verbose: bool) -> tuple[int, str, list[str]]:
        name, _, file = self.function.partition("@")  # a static function of two files: twin@other.c
        spec = PointSpec(name, file or None, line=line - self.decl_line)
        try:
            points = info.probe_points(spec)
        except UserError as error:
            return line, str(error), []
        # a name a probe cannot spell (debug info may hold any bytes) is listed, not a link
        capturable = sorted({v.name for point in points for v in point.variables
                             if v.listed_by_perf and v.name.isidentifier() and v.name.isprintable()})
        return line, format_points(spec, points, verbose=verbose), capturable

    def _show_variables(self, answer: tuple[int, str, list[str]]) -> None:
        line, text, capturable = answer
        if line == self.cursor_line:
            self.capturable = capturable
            self.query_one("#vars", Static).update(clickable_variables(text, set(capturable)))

    # --- actions ----------------------------------------------------------------------------

    def _probe_line(self, line: int, variable: str | None = None) -> None:
        """The builder, set up for a line probe here (numbered from the function's first line, as perf -L)."""
        if self.info is None or line not in self.query_one(SourceView).probeable:
            self.notify("This line has no probe point of its own: n / p jump to one that has.", severity="warning")
            return
        self.post_message(OpenBuilder(self.function, line=line - self.decl_line, variable=variable))

    def action_probe_here(self) -> None:
        if self.fallback:
            self.action_probe_function("entry")
        else:
            self._probe_line(self.cursor_line)

    @on(SourceView.ProbeRequested)
    def _line_clicked(self, message: SourceView.ProbeRequested) -> None:
        self._probe_line(message.line)

    def action_probe_variable(self, name: str) -> None:
        """A click on a variable in the pane: a line probe here capturing it."""
        self._probe_line(self.cursor_line, name)

    def action_probe_all_variables(self) -> None:
        if not self.capturable:
            self.notify("No capturable variable at this line.", severity="warning")
            return
        self._probe_line(self.cursor_line, " ".join(self.capturable))

    @on(Button.Pressed, "#entry")
    @on(Button.Pressed, "#return")
    def _kind_pressed(self, event: Button.Pressed) -> None:
        self.action_probe_function("return" if event.button.id == "return" else "entry")

    def action_probe_function(self, kind: BuilderKind) -> None:
        self.post_message(OpenBuilder(self.symbol, kind=kind))

    def action_toggle_verbose(self) -> None:
        self.verbose = not self.verbose
        if self.info is not None and self.cursor_line in self.query_one(SourceView).probeable:
            self.load_variables(self.cursor_line)
