"""A cursor move repaints the two lines whose look changed, not the whole view (the cursor is a
reactive of each Line API widget), and what a partial repaint leaves on screen is what a full
repaint draws: no line keeps an old cursor or misses the new one.

``render_line`` is counted per line between two frames: Textual keeps every line it was not told
is dirty, so the count is exactly what a move asked to repaint.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest
from textual.app import App, ComposeResult
from textual.strip import Strip
from textual.widget import Widget

from kprobe_tui.kernel.catalog import Status
from kprobe_tui.stream.parser import Event
from kprobe_tui.stream.store import EventStore
from kprobe_tui.tui import theming
from kprobe_tui.tui.widgets.event_table import EventTable
from kprobe_tui.tui.widgets.function_list import FunctionList
from kprobe_tui.tui.widgets.source_view import SourceView

ROWS = 100  # more than a screen: the moves below scroll too
SIZE = (80, 24)
UPSIDE_DOWN = {"down": "up", "up": "down", "pagedown": "pageup", "pageup": "pagedown"}  # the table starts at its end


def function_list() -> FunctionList:
    return FunctionList(lambda name: Status.FTRACE, lambda name: "")


def fill_function_list(view: FunctionList) -> None:
    view.set_rows([f"function_{index}" for index in range(ROWS)], None)


def event_table() -> EventTable:
    store = EventStore(capacity=1000)
    store.extend(Event(ts=10.0 + index / 1000, cpu=index % 2, pid=4242, tgid=4242, comm="worker", flags="....",
                       event="hit", body=f"(hit+0x4/0x10) n={index}") for index in range(ROWS))
    return EventTable(store)


def fill_event_table(view: EventTable) -> None:
    view.rows_changed()  # the store grew: the table follows its newest row


def source_view() -> SourceView:
    return SourceView()


def fill_source_view(view: SourceView) -> None:
    view.show([f"int line_{number} = {number};" for number in range(1, ROWS + 1)], {2, 3, 5, 8, 13}, 0, cursor=1)


def cursor_line(view: Widget) -> int:
    """The widget line (0 at its top) that draws the cursor."""
    top = int(view.scroll_offset.y)
    if isinstance(view, SourceView):
        return view.cursor - 1 - top  # 1-based source lines
    assert isinstance(view, (FunctionList, EventTable))
    return view.cursor + view.header_lines - top


class Host(App):
    CSS_PATH = theming.LAYOUT  # the cursor's colour, as the app draws it

    def __init__(self, view: Widget) -> None:
        super().__init__()
        self.view = view

    def compose(self) -> ComposeResult:
        yield self.view


async def filled(fill: Callable, pilot) -> Widget:
    """The view laid out, focused, then filled (as the screens do: rows arrive once it is on screen)."""
    view = pilot.app.view
    view.focus()
    await settled(pilot)
    fill(view)
    await settled(pilot)
    return view


class RenderedLines:
    """Counts ``render_line`` calls per widget line."""

    def __init__(self, view: Widget) -> None:
        self.counts: Counter[int] = Counter()
        render_line = view.render_line

        def counted(y: int) -> Strip:
            self.counts[y] += 1
            return render_line(y)

        view.render_line = counted  # type: ignore[method-assign]


async def settled(pilot) -> str:
    """The screen once nothing is left to draw."""
    await pilot.pause()
    await pilot.pause()
    return pilot.app.export_screenshot()


async def fully_repainted(pilot, view: Widget) -> str:
    view.refresh()
    return await settled(pilot)


WIDGETS = pytest.mark.parametrize(("make", "fill"), [(function_list, fill_function_list),
                                                   (event_table, fill_event_table),
                                                   (source_view, fill_source_view)],
                                  ids=["function_list", "event_table", "source_view"])


@WIDGETS
async def test_a_cursor_move_repaints_only_the_two_lines_it_changes(make, fill):
    app = Host(make())
    async with app.run_test(size=SIZE) as pilot:
        view = await filled(fill, pilot)
        lines = RenderedLines(view)
        key = UPSIDE_DOWN["down"] if isinstance(view, EventTable) else "down"
        before, top = cursor_line(view), view.scroll_offset.y
        await pilot.press(key)
        await settled(pilot)
        after = cursor_line(view)
        assert abs(after - before) == 1 and view.scroll_offset.y == top  # moved one row, did not scroll
        assert lines.counts == {before: 1, after: 1}, "a one-row move repaints the old and the new cursor line"


@WIDGETS
async def test_what_a_move_leaves_on_screen_is_what_a_full_repaint_draws(make, fill):
    """Moves within the screen, moves that scroll, pages, clicks and a burst of moves in one frame:
    after each, the screen is the same before and after the whole widget is repainted."""
    app = Host(make())
    async with app.run_test(size=SIZE) as pilot:
        view = await filled(fill, pilot)
        height = view.scrollable_content_region.height
        moves = ["down", "down", "up", "pagedown", "pagedown", "up", "down", "pageup", "pageup", "pageup", "down"]
        if isinstance(view, EventTable):
            moves = [UPSIDE_DOWN[key] for key in moves] + ["end"]
        for step, key in enumerate(moves, 1):
            await pilot.press(key)
            shown = await settled(pilot)
            assert shown == await fully_repainted(pilot, view), f"stale lines after move {step} ({key})"
        top = int(view.scroll_offset.y)
        for row in (height // 2, 1, height // 2):  # clicks within the screen
            await pilot.click(view, offset=(12, row))
            shown = await settled(pilot)
            assert cursor_line(view) == row
            assert shown == await fully_repainted(pilot, view), f"stale lines after a click on line {row}"
        assert int(view.scroll_offset.y) == top
        for delta in (1, 1, -1, 3, -2, 1):  # typing fast: several moves between two frames
            view.action_move(delta)
        shown = await settled(pilot)
        assert shown == await fully_repainted(pilot, view), "stale lines after moves between two frames"


def refilter_function_list(view: FunctionList) -> None:
    """As many names as wide, none of them the cursor's: the virtual size stays, the cursor goes to the top."""
    view.set_rows([f"symbol___{index}" for index in range(ROWS)], None)


def refilter_event_table(view: EventTable) -> None:
    view.store.set_filter(lambda event: event.cpu == 1)
    view.rows_changed()


def reopen_source_view(view: SourceView) -> None:
    view.show([f"long other_{number};" for number in range(1, ROWS // 2)], {4, 6}, 10, cursor=4)


@pytest.mark.parametrize(("make", "fill", "change"), [(function_list, fill_function_list, refilter_function_list),
                                                      (event_table, fill_event_table, refilter_event_table),
                                                      (source_view, fill_source_view, reopen_source_view)],
                         ids=["function_list", "event_table", "source_view"])
async def test_new_rows_repaint_the_whole_view(make, fill, change):
    """A new result, filter or file changes every line, cursor or not: all of them are repainted."""
    app = Host(make())
    async with app.run_test(size=SIZE) as pilot:
        view = await filled(fill, pilot)
        await pilot.press("down", "down")
        await settled(pilot)
        change(view)
        shown = await settled(pilot)
        assert shown == await fully_repainted(pilot, view)
