"""The call graph screen under Pilot: on this kernel, which has no function_graph tracer, the run's refusal is
said on the screen and nothing is touched; a replay of the 6.1 guest's real trace (tests/fixtures/graph) is one
row per call path, open two levels deep, and enter asks for the highlighted function's source."""

from __future__ import annotations

import pytest
from textual.app import App
from textual.widgets import Static, Tree

from kprobe_tui.kernel.sources import locate
from kprobe_tui.stream.callgraph import summarize
from kprobe_tui.tui.app import KprobeTui
from kprobe_tui.tui.navigation import OpenSource
from kprobe_tui.tui.screens.calltree import CallGraphScreen
from kprobe_tui.tui.screens.functions import FunctionsScreen
from kprobe_tui.tui.widgets.function_list import FunctionList
from tests.tui.states import catalog_loaded, guest_graph, guest_graph_errors, kernel_app, to_functions, until


class Host(App):
    """The screen alone; what it asks the app for is kept."""

    def __init__(self, screen: CallGraphScreen) -> None:
        super().__init__()
        self.graph_screen = screen
        self.asked: list[str] = []

    def on_mount(self) -> None:
        self.push_screen(self.graph_screen)

    def on_open_source(self, message: OpenSource) -> None:
        self.asked.append(message.function)


async def outermost(pilot, app: Host):
    """The tree's one top row (the graphed function), once the tree is filled."""
    tree = app.graph_screen.query_one("#call-tree", Tree)
    await until(pilot, lambda: tree.root.children, "the tree is filled")
    [root] = tree.root.children
    return root


def status(app: Host) -> str:
    return str(app.graph_screen.query_one("#graph-status", Static).render())


@pytest.mark.live
async def test_a_kernel_without_the_graph_tracer_is_said_on_the_screen(tracefs_root):
    tracefs = locate().tracing()
    before = tracefs.read("current_tracer")
    app = Host(CallGraphScreen("vfs_read", tracefs))
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: "no function_graph tracer" in status(app), "the refusal is shown")
        assert not app.graph_screen.running
    assert tracefs.read("current_tracer") == before


async def test_the_guests_calls_are_one_row_per_path_and_enter_opens_the_source():
    answer = guest_graph()
    app = Host(CallGraphScreen("vfs_read", None, answer))
    async with app.run_test(size=(80, 24)) as pilot:
        root = await outermost(pilot, app)
        paths = summarize(answer.calls)
        assert root.data == "vfs_read" and root.is_expanded
        assert [child.data for child in root.children] == [p.path[-1] for p in paths if len(p.path) == 2]
        assert not any(child.is_expanded for child in root.children)  # two levels open: the rest on demand
        assert str(root.label).split()[0] == str(len(answer.calls))
        assert f"vfs_read: {len(answer.calls)} calls on 4 threads" in status(app)
        await pilot.press("down")
        await pilot.press("enter")
        await until(pilot, lambda: app.asked, "the source is asked for")
        assert app.asked == [root.children[0].data]


async def test_g_in_the_browser_of_a_snapshot_hands_the_command_to_an_administrator():
    app = kernel_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await to_functions(pilot)
        name = app.screen.query_one(FunctionList).current
        await pilot.press("g")
        await pilot.pause()
        assert isinstance(app.screen, FunctionsScreen)
        said = [notification.message for notification in app._notifications]
        assert any(f"Copied for an administrator: sudo kprobe-tui graph {name} --duration 5" in text for text in said)


@pytest.mark.live
async def test_g_in_the_live_browser_opens_the_call_tree_which_says_why_it_cannot_run():
    app = KprobeTui(locate())
    async with app.run_test(size=(80, 24)) as pilot:
        await catalog_loaded(pilot)
        await pilot.press("slash", *"vfs_read", "escape")
        await until(pilot, lambda: app.screen.query_one(FunctionList).current == "vfs_read", "vfs_read is highlighted")
        await pilot.press("g")
        await until(pilot, lambda: isinstance(app.screen, CallGraphScreen), "the call tree opens")
        await until(pilot, lambda: "no function_graph tracer" in str(app.screen.query_one("#graph-status", Static).render()),
                    "the refusal is shown")


async def test_return_values_show_each_paths_errors_and_where_the_failing_calls_first_error_came_from():
    """The 6.12 guest's graph --retval of four failing opens and one that succeeds, replayed."""
    answer = guest_graph_errors()
    app = Host(CallGraphScreen("do_sys_openat2", None, answer))
    async with app.run_test(size=(80, 24)) as pilot:
        root = await outermost(pilot, app)
        assert str(root.label).split()[0] == "5" and str(root.label).endswith("= -2 ENOENT x4")
        [opens] = [node for node in root.children if node.data == "do_filp_open"]
        [path_openat] = opens.children
        assert str(path_openat.label).endswith("path_openat  = -2 ENOENT x4 <- first x4")
        assert "return values of 9 functions" in status(app)
        getname = next(node for node in root.children if node.data == "getname")
        assert "=" not in str(getname.label)  # a pointer: no error
