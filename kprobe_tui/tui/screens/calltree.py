"""What a kernel function calls, as a tree: ``kprobe-tui graph FUNC`` in the TUI.

The run is the command's (``stream.callgraph.graph_calls``: the function_graph tracer borrowed and given
back) for a few seconds, on every thread but ours, in a worker; escape stops it early and shows what was
seen, a second escape goes back. Each row is one call path: calls, total and self time, the function
indented under its caller; enter opens the highlighted function's source, so the next probe is one step
away. The tree holds call paths, not calls: thousands of calls of one path are one row. ``e`` runs again
with return values (``graph --retval``): a path's error codes, and ``<- first`` where failing calls' first
error came from.
"""

from __future__ import annotations

import threading
from functools import partial
from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Static, Tree
from textual.widgets.tree import TreeNode

from kprobe_tui.errors import UserError
from kprobe_tui.kernel.funcgraph import GraphSettings
from kprobe_tui.stream.callgraph import GraphAnswer, PathTotals, error_name, graph_calls, thread_names
from kprobe_tui.textsafe import printable
from kprobe_tui.tui.navigation import Back, OpenSource
from kprobe_tui.tui.plain import plain
from kprobe_tui.tui.theming import LAYOUT
from kprobe_tui.tui.widgets.key_footer import KeyFooter
from kprobe_tui.tui.work import Background

if TYPE_CHECKING:
    from kprobe_tui.kernel.tracefs import Tracefs

GRAPH_SECONDS = 5.0
GRAPH_DEPTH = 4
MAX_CALLS = 1000
OPEN_LEVELS = 2  # rows shown open at first: the function and what it calls directly


def path_label(entry: PathTotals) -> Text:
    """``  105   33532.4   30962.3  vfs_read``: calls, total and self microseconds, then the name (plain text),
    then its error codes where return values were read (``= -2 ENOENT x3 <- first x3``)."""
    label = Text.assemble((f"{entry.calls:>6} {entry.total_ns / 1000:>10.1f} {entry.self_ns / 1000:>10.1f}  ", "dim"),
                          printable(entry.path[-1]))
    if entry.errors:
        label.append("  = " + ", ".join(f"{error_name(code)} x{count}" for code, count in entry.errors.most_common(2)),
                     "red")
    if entry.first_errors:
        label.append(f" <- first x{entry.first_errors}", "bold red")
    return label


class CallGraphScreen(Screen):
    CSS_PATH = LAYOUT
    AUTO_FOCUS = "#call-tree"
    BINDINGS = [Binding("escape", "back", "Stop/Back"), Binding("r", "again", "Run again"),
                Binding("e", "errors", "Errors"),
                Binding("enter", "source", "Source", show=True, priority=True)]

    def __init__(self, function: str, tracefs: Tracefs | None, answer: GraphAnswer | None = None) -> None:
        """``answer``: a run to show instead of running (a replay: the screenshots show a guest's)."""
        super().__init__()
        self.function = function
        self.tracefs = tracefs
        self.answer = answer
        self.work = Background(self)
        self.stop = threading.Event()
        self.running = False
        self.retvals = False  # the runs read return values (e)

    def compose(self) -> ComposeResult:
        yield Static("", id="graph-status")
        yield Tree(Text(self.function), id="call-tree")
        yield KeyFooter()

    def on_mount(self) -> None:
        if self.answer is not None:
            self.show(self.answer)
        else:
            self.action_again()

    def on_unmount(self) -> None:
        self.stop.set()  # the worker gives the tracer back within a poll (100 ms)

    def action_again(self) -> None:
        if self.running or self.tracefs is None:
            return
        self.stop = threading.Event()
        self.running = True
        self._status(f"Graphing {self.function} for {GRAPH_SECONDS:g} s on every thread but kprobe-tui's "
                     f"(depth {GRAPH_DEPTH}{', return values' if self.retvals else ''})… escape stops")
        settings = GraphSettings(self.function, GRAPH_DEPTH)
        run = partial(graph_calls, self.tracefs, settings, seconds=GRAPH_SECONDS, max_calls=MAX_CALLS,
                      done=self.stop.is_set, retvals=self.retvals)
        self.work.run("graph", run, then=self.show, failed=self._failed)

    def action_errors(self) -> None:
        """Run again reading return values (a return probe on each function seen): which calls failed, and
        where each failing call's first error came from."""
        if self.running or self.tracefs is None:
            return
        self.retvals = True
        self.action_again()

    def show(self, answer: GraphAnswer) -> None:
        self.running = False
        threads = thread_names(answer.calls)
        ended = {"deadline": f"{GRAPH_SECONDS:g} s", "max-calls": f"{MAX_CALLS} calls", "done": "stopped",
                 "interrupted": "stopped"}[answer.ended]
        left_out = answer.orphans + answer.open_calls
        self._status(f"{self.function}: {len(answer.calls)} calls on {len(threads)} thread{'s' if len(threads) != 1 else ''} ({ended})"
                     + (f", {left_out} cut off at the edges" if left_out else "")
                     + (f", {answer.lost} lost by the kernel" if answer.lost else "")
                     + (f", return values of {len(answer.returns.probed)} functions" if answer.returns else "")
                     + "  ·  calls, total and self µs")
        tree = self.query_one("#call-tree", Tree)
        tree.clear()
        paths = answer.paths
        callers = {entry.path[:-1] for entry in paths}
        nodes: dict[tuple[str, ...], TreeNode] = {}
        for entry in paths:
            parent = nodes.get(entry.path[:-1], tree.root)
            if entry.path in callers:
                nodes[entry.path] = parent.add(path_label(entry), data=entry.path[-1],
                                               expand=len(entry.path) < OPEN_LEVELS)
            else:
                parent.add_leaf(Text("  ") + path_label(entry), data=entry.path[-1])  # where a caller's ▶ is
        tree.root.expand()
        tree.show_root = False

    def _failed(self, exc: UserError) -> None:
        self.running = False
        self._status(str(exc))

    def _status(self, text: str) -> None:
        self.query_one("#graph-status", Static).update(plain(text))

    def action_source(self) -> None:
        node = self.query_one("#call-tree", Tree).cursor_node
        if node is not None and node.data:
            self.post_message(OpenSource(node.data.split(" [", 1)[0]))  # "func [module]": the function

    def action_back(self) -> None:
        if self.running:
            self.stop.set()
            return
        self.post_message(Back())
