"""The TUI flow on a kernel function inside the guest, where there is BTF but no DWARF.

Pilot drives the app as a user would: filter to do_sys_openat2, Enter (the source view falls
back to the BTF prototype), Entry, tick ``filename`` in the variables tree, Create, and the
events table must show the file name a ``cat`` of ours opens. Python runs 15-25x slower under
TCG: one flow, and every wait is for a condition, with a generous budget.
"""

from __future__ import annotations

import asyncio

import pytest
from guestlib import trigger_open

from kprobe_tui import blocking
from kprobe_tui.kernel import lifetime
from kprobe_tui.kernel.events import Events
from kprobe_tui.kernel.sources import locate
from kprobe_tui.tui.app import KprobeTui
from kprobe_tui.tui.screens.builder import ProbeBuilderScreen
from kprobe_tui.tui.screens.events import EventsScreen
from kprobe_tui.tui.screens.source import SourceScreen
from kprobe_tui.tui.widgets.function_list import FunctionList
from kprobe_tui.tui.widgets.variable_tree import VariableTree

pytestmark = pytest.mark.kernel
FUNCTION = "do_sys_openat2"


async def until(pilot, condition, what: str, seconds: float = 180) -> None:
    """Let the app run until ``condition()`` holds, or fail saying what never happened."""
    for _ in range(int(seconds / 0.1)):
        if condition():
            return
        await pilot.pause(0.1)
    raise AssertionError(f"never happened (in {seconds:.0f} s): {what}")


async def test_btf_only_flow_shows_the_file_name_that_cat_opens(tracefs, tmp_path):
    marker = tmp_path / "kptui-flow-opened-this"
    marker.write_text("x\n")
    group = lifetime.run_name()
    app = KprobeTui(locate())
    try:
        async with app.run_test(size=(100, 30)) as pilot:
            functions = app.screen.query_one(FunctionList)
            await until(pilot, lambda: functions.rows, "the function list is filled")
            await pilot.press("slash", *FUNCTION, "escape")
            for _ in range(5):  # __do_sys_openat2 and the like match too
                if functions.current == FUNCTION:
                    break
                await pilot.press("down")
            assert functions.current == FUNCTION

            await pilot.press("enter")
            await until(pilot, lambda: isinstance(app.screen, SourceScreen), "the source view opens")
            source = app.screen
            await until(pilot, lambda: source.fallback, "the source view falls back to BTF")
            assert "const char *filename" in str(source.query_one("#prototype").render())
            await pilot.press("enter")  # Entry
            await until(pilot, lambda: isinstance(app.screen, ProbeBuilderScreen) and app.screen.is_mounted,
                        "the builder opens")  # by a message
            builder = app.screen
            await until(pilot, lambda: builder.query_one("#kind").value == "entry", "the builder is set for an entry probe")
            tree = builder.query_one(VariableTree)
            await until(pilot, lambda: tree.root.children, "the BTF parameters are in the tree")
            names = [node.data.name for node in tree.root.children]
            assert names == ["dfd", "filename", "how"]
            tree.focus()
            await pilot.pause()
            while tree.cursor_node.data.name != "filename":
                await pilot.press("down")
            await pilot.press("space")
            assert builder.query_one("#args").value.startswith("filename")
            await until(pilot, lambda: builder.preview is not None and builder.preview.error is None
                        and "filename=" in builder.preview.probes[0].definition(), "the preview compiles")
            await pilot.press("ctrl+s")
            await until(pilot, lambda: isinstance(app.screen, EventsScreen), "the probe is made (in a worker)")
            events_screen = app.screen
            assert isinstance(events_screen, EventsScreen), builder.query_one("#status").render()
            [created] = builder.created

            def opened() -> bool:
                return any(str(marker) in event.body for event in events_screen.store.view_rows(0, len(events_screen.store)))

            for _ in range(20):  # cat again until the reader has caught one (it starts on its own thread)
                await asyncio.to_thread(trigger_open, marker)
                try:
                    await until(pilot, opened, f"{created} shows {marker}", seconds=10)
                    break
                except AssertionError:
                    continue
            assert opened(), f"{created} never showed {marker}"

            await pilot.press("escape")  # events -> builder -> source -> functions, each as it was
            await until(pilot, lambda: app.screen is builder, "back to the builder")
            await pilot.press("escape")
            await until(pilot, lambda: app.screen is source, "back to the source view")
            assert source.fallback
            await pilot.press("escape")
            await until(pilot, lambda: app.screen is not source, "back to the function list")
            assert app.screen.query_one(FunctionList) is functions and functions.current == FUNCTION
            events = Events(tracefs)
            [made] = [e for e in events.events_in(group) if e.full_name == created]
            with blocking.knowingly():  # the test's own clean-up, on the app's thread
                events.delete(made)
            assert events.events_in(group) == []
            await pilot.press("q")
    finally:
        lifetime.undo.run_all()  # what the end of the process does; the tracefs fixture checks
