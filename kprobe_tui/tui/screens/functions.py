"""The first screen: every kernel function, a filter box, and why each one can or cannot be probed."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Header, Input, Static

from kprobe_tui.kernel.catalog import STATUS_HELP, Function, FunctionCatalog, Status
from kprobe_tui.matching import MODES, IncrementalFilter, Matcher
from kprobe_tui.textsafe import printable
from kprobe_tui.tui.navigation import OpenBuilder, OpenGraph, OpenSource, OpenStats
from kprobe_tui.tui.plain import plain
from kprobe_tui.tui.screens.stats import StatsRequest
from kprobe_tui.tui.theming import LAYOUT
from kprobe_tui.tui.widgets.filter_bar import FilterBar
from kprobe_tui.tui.widgets.function_list import STATUS_GLYPH, FunctionList
from kprobe_tui.tui.widgets.key_footer import KeyFooter
from kprobe_tui.tui.work import Background


class FunctionsScreen(Screen):
    """Owns the filter state; the list renders, the detail pane explains.

    Letters are actions on the list (as in less, vim or htop) and ``/`` starts the filter: every key
    typed after it, however fast, goes to the filter (keys.py). In the filter, Enter opens the
    highlighted function, the arrow and page keys move the highlight, escape goes back to the list
    keeping the filter (escape on the list clears it)."""

    CSS_PATH = LAYOUT
    AUTO_FOCUS = "FunctionList"
    BINDINGS = [
        Binding("slash", "focus_filter", "Filter"),
        Binding("ctrl+t", "cycle_mode", "Match mode", show=False),  # the filter's line says it, with the mode
        Binding("escape", "escape", "Clear", show=False),
        Binding("tab", "focus_next", "Next pane", show=False),
        Binding("n", "show_notes", "Notes", show=False),
        Binding("p", "build_probe", "Probe"),
        Binding("c", "count_calls", "Count"),
        Binding("L", "latency", "Latency"),
        Binding("g", "graph", "Graph", show=False),  # help and the palette name it: the footer is full at 80
    ]
    # While typing in the filter, these move the list's highlight (the list, focused, has them as bindings;
    # here they are keys, not bindings, so help lists the list's own once).
    TYPING_MOVES: ClassVar[dict[str, tuple[str, int]]] = {
        "up": ("move", -1), "down": ("move", 1), "pageup": ("page", -1), "pagedown": ("page", 1)}

    def __init__(self, catalog_loader) -> None:
        super().__init__()
        self._load_catalog = catalog_loader
        self.catalog: FunctionCatalog | None = None
        self._filter: IncrementalFilter | None = None
        self.mode = "substring"
        self.shown = 0
        self.work = Background(self)

    def compose(self) -> ComposeResult:
        yield Header()
        yield FilterBar("substring, glob (tcp_*), fuzzy: ctrl+t", "loading…", note_id="filter-info",
                        fixed_note=True)
        yield Static("", id="notes")
        yield FunctionList(self._status_of, self._module_of, id="functions")
        yield Static("", id="detail")
        yield Static("", id="legend")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.query_one("#detail", Static).update("Reading /proc/kallsyms, the ftrace list and the blacklist…")
        self.work.run("catalog", self._load_catalog, then=self.show_catalog)

    def show_catalog(self, catalog: FunctionCatalog) -> None:
        self.catalog = catalog
        self._filter = IncrementalFilter(catalog.names)
        notes = self.query_one("#notes", Static)
        notes.display = bool(catalog.notes)
        if catalog.notes:
            more = f" (+{len(catalog.notes) - 1} more: n)" if len(catalog.notes) > 1 else ""
            notes.update(plain(f"! {catalog.notes[0]}{more}"))
            notes.tooltip = plain("\n".join(catalog.notes))
        self._render_legend()
        self.apply_filter()
        # prototypes and sizes, after the list is on screen
        self.work.run("warm", catalog.warm, then=lambda _: self._show_detail(self.query_one(FunctionList).current))

    # --- filtering ----------------------------------------------------------------------------

    @on(Input.Changed, "#filter")
    def _filter_changed(self) -> None:
        self.apply_filter()

    @on(Input.Submitted, "#filter")
    def _filter_submitted(self) -> None:
        """Enter in the filter opens the highlighted function, as Enter on the list does.

        The list takes the focus first: back from the source (Escape), a letter is the list's action
        (``c`` counts), not one more letter of a filter the user has left."""
        functions = self.query_one(FunctionList)
        name = functions.current
        if name is not None:
            self.set_focus(functions)
            self.post_message(OpenSource(name))

    def apply_filter(self) -> None:
        if self._filter is None:
            return
        query = self.query_one(FilterBar).value.strip()
        matcher = Matcher.for_query(query, "glob" if self.mode == "substring" and any(c in query for c in "*?[") else self.mode)
        rows = self._filter.apply(matcher)
        self.shown = len(rows)
        self.query_one(FunctionList).set_rows(rows, matcher if query else None)
        self.query_one(FilterBar).note(f"{matcher.mode} · {len(rows):,}/{len(self._filter.names):,}")

    def action_cycle_mode(self) -> None:
        self.mode = MODES[(MODES.index(self.mode) + 1) % len(MODES)]
        self.apply_filter()

    def action_show_notes(self) -> None:
        if self.catalog is not None and self.catalog.notes:
            self.notify("\n\n".join(self.catalog.notes), title="About this function list", timeout=15)

    def action_build_probe(self) -> None:
        name = self.query_one(FunctionList).current
        if name is None:
            return
        status, reason = self.catalog.classify(name) if self.catalog is not None else (None, "")
        if status is Status.NO_KPROBES:  # no builder for what no probe can be made of
            self.notify(f"{reason}. D: the doctor's findings", title=f"{name}: cannot be probed", severity="error",
                        timeout=10)
            return
        self.post_message(OpenBuilder(name))

    def action_count_calls(self) -> None:
        """The statistics view counting calls of every function the filter matches (a glob, by function), or
        of the one function it matches (by process, as a lab's "which process calls it" asks)."""
        query = self.query_one("#filter", Input).value.strip()
        if not query or self.mode == "fuzzy":
            self.notify("count calls takes the filter as a glob: type one (tcp_*), in substring or glob mode",
                        severity="warning")
            return
        functions = self.query_one(FunctionList)
        if len(functions.rows) == 1:  # the filter found one function: count its calls per process
            self.post_message(OpenStats(StatsRequest((functions.rows[0],), self._binary(), key="comm")))
            return
        pattern = query if self.mode == "glob" or any(c in query for c in "*?[") else f"*{query}*"
        glob = any(c in pattern for c in "*?[")
        self.post_message(OpenStats(StatsRequest((pattern,), self._binary(), key="probe" if glob else None)))

    def action_latency(self) -> None:
        """The statistics view of the highlighted function's latency, entry to return."""
        name = self.query_one(FunctionList).current
        if name is not None:
            self.post_message(OpenStats(StatsRequest((name,), self._binary(), function=name, key=None, value="latency")))

    def action_graph(self) -> None:
        """The call tree of the highlighted kernel function (the function_graph tracer knows no program's)."""
        name = self.query_one(FunctionList).current
        if name is None:
            return
        if self._binary() is not None:
            self.notify("the call graph follows kernel functions (the kernel's function_graph tracer); for a "
                        "program's calls use uftrace", title="Graph", severity="warning")
            return
        self.post_message(OpenGraph(name))

    def _binary(self) -> str | None:
        """The program browsed with -x (its functions get uprobes), None for the kernel."""
        binary = getattr(self.app, "binary", None)
        return str(binary.path) if binary is not None else None

    def action_focus_filter(self) -> None:
        self.query_one(FilterBar).focus_now()

    def action_escape(self) -> None:
        """From the filter back to the list, keeping what it matched; on the list, clear the filter."""
        functions = self.query_one(FunctionList)
        bar = self.query_one(FilterBar)
        if bar.input.has_focus:
            self.set_focus(functions)
        else:
            bar.input.value = ""

    def on_key(self, event: events.Key) -> None:
        """Up, down, page up and page down typed in the filter move the highlight Enter opens."""
        move = self.TYPING_MOVES.get(event.key)
        if move is not None and self.query_one(FilterBar).input.has_focus:
            action, step = move
            getattr(self.query_one(FunctionList), f"action_{action}")(step)
            event.stop()

    # --- detail -------------------------------------------------------------------------------

    def _shown(self) -> FunctionCatalog:
        """The catalog, once shown: the list has no rows, the pane no function and the legend no
        labels before ``show_catalog``, so nothing asks for it sooner."""
        if self.catalog is None:
            raise RuntimeError("the function catalog was asked for before it was shown")
        return self.catalog

    def _status_of(self, name: str) -> Status:
        return self._shown().status(name)

    def _module_of(self, name: str) -> str:
        return self._shown().module(name)

    @on(FunctionList.Highlighted)
    def _highlighted(self, message: FunctionList.Highlighted) -> None:
        self._show_detail(message.name)

    def _show_detail(self, name: str | None) -> None:
        """What is known at once; with the catalog warm, the whole function from a worker (a -x
        binary's prototype is read from DWARF): the pane keeps the last one until it comes, and a
        quicker cursor's newer name drops an older answer."""
        detail = self.query_one("#detail", Static)
        if not (self.catalog is not None and self.catalog.details_ready and name is not None):
            self.work.forget("detail")  # what it answers is of a function no longer highlighted
        if name is None or self.catalog is None:
            detail.update("No function matches the filter.", layout=False)
        elif self.catalog.details_ready:
            self.work.run("detail", self.catalog.function, name,
                          then=lambda function: detail.update(self._describe(function), layout=False))
        else:  # BTF still loading: what is known without it
            status, reason = self.catalog.classify(name)
            detail.update(self._describe(Function(name, self.catalog.module(name), (), None, status, reason, None)),
                          layout=False)

    def _describe(self, function: Function) -> Text:
        functions = self.query_one(FunctionList)
        status_style = functions.get_component_rich_style(f"function-list--{function.status.value}", partial=True)
        text = Text()
        text.append(printable(function.name), style="bold")
        catalog = self._shown()
        label = catalog.labels.get(function.status, function.status.value)
        text.append(f"  {STATUS_GLYPH[function.status]} {label}", style=status_style)
        text.append("\n")
        missing = catalog.missing_prototype
        text.append(printable(function.prototype or missing), style="italic" if function.prototype else "dim")
        text.append("\n")
        where = [catalog.where(function)]
        if len(function.symbols) == 1 and function.symbols[0].address:
            where.append(f"address 0x{function.symbols[0].address:x}")
        if function.size:
            where.append(f"size {function.size} bytes")
        text.append(printable("  ".join(where)), style="dim")
        text.append("\n")
        text.append(printable(function.reason))
        return text

    def _render_legend(self) -> None:
        functions = self.query_one(FunctionList)
        legend = Text()
        for status, label in self._shown().labels.items():
            style = functions.get_component_rich_style(f"function-list--{status.value}", partial=True)
            legend.append(f"{STATUS_GLYPH[status]} {label} ", style=style)
        legend_widget = self.query_one("#legend", Static)
        legend_widget.update(legend)
        legend_widget.tooltip = "\n".join(f"{STATUS_GLYPH[s]} {s.value}: {text}" for s, text in STATUS_HELP.items())

    @on(FunctionList.Selected)
    def _selected(self, message: FunctionList.Selected) -> None:
        self.post_message(OpenSource(message.name))
