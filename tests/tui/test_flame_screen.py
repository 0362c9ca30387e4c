"""The flame graph screen under Pilot, on kmem_cache_alloc's kernel stacks as bpftrace counted them in the
Debian 6.1 guest (tests/fixtures/stacks: ``@[kstack] = count()`` during dd, cat, ls, od, ps, folded):
the cursor's moves, zoom and back, search, the source key, a hostile frame name, and the statistics view's
key that opens it."""

from __future__ import annotations

import pytest
from rich.cells import cell_len
from textual.app import App
from textual.widgets import Static

from kprobe_tui.aggregate.result import Entry, Result, Stats
from kprobe_tui.stream.flame import ROOT, FlameLayout
from kprobe_tui.tui.navigation import Back, OpenSource
from kprobe_tui.tui.screens.flame import FlameScreen, OpenFlame
from kprobe_tui.tui.screens.stats import StatsRequest, StatsScreen
from kprobe_tui.tui.widgets.flame import MATCH, FlameView
from tests.tui.states import guest_stacks, kernel_app, settled, to_functions, until


class Host(App):
    """A screen alone; what it asks the app for is kept."""

    def __init__(self, screen) -> None:
        super().__init__()
        self.first = screen
        self.asked: list = []

    def on_mount(self) -> None:
        self.push_screen(self.first)

    def on_open_source(self, message: OpenSource) -> None:
        self.asked.append(message.function)

    def on_back(self, message: Back) -> None:
        self.asked.append("back")

    def on_open_flame(self, message: OpenFlame) -> None:
        self.asked.append(message)


def guest_screen(stacks: dict[tuple[str, ...], int] | None = None) -> tuple[FlameScreen, Host]:
    screen = FlameScreen(stacks or guest_stacks(), "kmem_cache_alloc by kernel stack")
    return screen, Host(screen)


def rows(view: FlameView) -> list[str]:
    return [view.render_line(y).text for y in range(view.scrollable_content_region.height)]


def status(screen: FlameScreen) -> str:
    return str(screen.query_one("#flame-status", Static).render())


def name(view: FlameView, frame: int) -> str:
    return view.flame.name(frame)


async def test_the_cursor_moves_across_callers_callees_and_siblings_and_a_click_selects():
    screen, app = guest_screen()
    async with app.run_test(size=(120, 40)) as pilot:
        view = screen.query_one(FlameView)
        flame = view.flame
        assert view.has_focus and view.cursor == ROOT
        assert f"all · {flame.total:,} (100.0% of all)" in status(screen)
        await pilot.press("down")  # the widest callee: where most allocations come from
        widest = max(flame.children(ROOT), key=flame.count)
        assert view.cursor == widest
        assert status(screen).startswith(f"{name(view, widest)} · {flame.count(widest):,} ({flame.share(widest):.1%} of all")
        drawn = [cell.frame for cell in view.row_cells(1)]
        assert len(drawn) > 1, "the guest's stacks begin in more than one place"
        at = drawn.index(widest)
        await pilot.press("right" if at + 1 < len(drawn) else "left")
        assert view.cursor == drawn[at + 1 if at + 1 < len(drawn) else at - 1]
        await pilot.press("up")
        assert view.cursor == ROOT
        # a click on a frame of the third row selects it
        cell = max(view.row_cells(2), key=lambda cell: cell.end - cell.first)
        await pilot.click(FlameView, offset=(cell.first + 1, 2))
        assert view.cursor == cell.frame


async def test_enter_zooms_into_a_frame_and_escape_zooms_back_out_then_goes_back():
    screen, app = guest_screen()
    async with app.run_test(size=(120, 40)) as pilot:
        view = screen.query_one(FlameView)
        flame = view.flame
        await pilot.press("down", "down", "down")
        chosen = view.cursor
        width = view.scrollable_content_region.width
        assert flame.share(chosen) < 0.9
        await pilot.press("enter")
        assert view.zoomed.frame == chosen
        depth = flame.depth_of(chosen)
        shown = rows(view)
        # the frame takes the whole width, its callers above it too, its callees scaled to it below
        for row, frame in enumerate(flame.ancestors(chosen)):
            assert shown[row].startswith(name(view, frame)[: width - 1]), row
            assert [cell.frame for cell in view.row_cells(row)] == [frame]
        below = view.row_cells(depth + 1)
        assert below and {flame.parent(cell.frame) for cell in below} == {chosen}
        assert f"of {name(view, chosen)})" in status(screen)
        await pilot.press("escape")
        assert view.zoomed.frame == ROOT and view.cursor == chosen
        assert app.asked == []
        await pilot.press("escape")  # at the whole graph: back
        assert app.asked == ["back"]


async def test_search_marks_the_matching_frames_and_says_their_share():
    stacks = guest_stacks()
    screen, app = guest_screen(stacks)
    async with app.run_test(size=(160, 50)) as pilot:
        view = screen.query_one(FlameView)
        await pilot.press("slash", "P", "9", "_", "c", "l", "i", "e", "n", "t", "enter")
        assert view.has_focus
        # counted from the stacks themselves: a stack with any matching frame counts once
        expected = sum(count for stack, count in stacks.items() if any("p9_client" in frame for frame in stack))
        assert expected, "the guest's stacks read files over 9p"
        matches = view.matches
        assert matches and all("p9_client" in name(view, frame) for frame in matches)
        assert view.flame.matched_count(matches) == expected
        note = str(screen.query_one("#flame-matches", Static).render())
        assert note == f"{len(matches):,} frames, {expected / sum(stacks.values()):.1%}"
        painted = [segment for y in range(view.scrollable_content_region.height) for segment in view.render_line(y)
                   if segment.style is not None and segment.style.bgcolor == MATCH.bgcolor]
        assert painted and all("p9" in segment.text or len(segment.text.strip()) < 3 for segment in painted)
        await pilot.press("slash", "ctrl+u", "enter")  # an empty search clears the marks
        assert not view.matches


async def test_s_asks_for_the_frames_function_and_refuses_a_frame_without_one():
    stacks = {("entry_SYSCALL_64_after_hwframe+0x6e", "p9_client_zc_rpc.constprop.0+0x8e [9pnet]"): 5,
              ("0xffffffffc0ffee00",): 1}
    screen = FlameScreen(stacks, "test")
    app = Host(screen)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("s")  # on "all"
        await pilot.press("down", "left", "s")  # the widest callee, then the address left of it
        assert app.asked == []
        assert any("names no function" in notice.message for notice in app._notifications)
        await pilot.press("right", "down", "s")
        assert app.asked == ["p9_client_zc_rpc.constprop.0"]


async def test_s_on_an_inlined_frame_asks_for_the_inlined_function():
    """A frame the debug info names inlined (KernelFrames, UserFrames) opens that function's source."""
    stacks = {("do_syscall_64+0x5d common.c:76", "do_syscall_x64 (inlined) common.c:46",
               "square [prog] (inlined) work.c:4"): 3}
    screen = FlameScreen(stacks, "test")
    app = Host(screen)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("down", "down", "s", "down", "s")
        assert app.asked == ["do_syscall_x64", "square"]


HOSTILE = "[bold red]boom[/]\x1b]0;pwned\x07\u202etxt.exe漢字漢字" + "A" * 1_000_000


async def test_a_hostile_frame_name_is_shown_as_its_characters_and_cut_to_its_frame():
    stacks = {("entry", HOSTILE): 30, ("entry", "漢字漢字漢字漢字漢字"): 1, ("entry", "x"): 2}
    screen = FlameScreen(stacks, HOSTILE)
    app = Host(screen)
    async with app.run_test(size=(80, 24)) as pilot:
        view = screen.query_one(FlameView)
        width = view.scrollable_content_region.width
        await pilot.press("down", "down")
        for line in (*rows(view), status(screen), str(screen.query_one("#flame-title", Static).render())):
            assert "\x1b" not in line and "\x07" not in line and "\u202e" not in line
        shown = rows(view)
        assert shown[2].startswith("[bold red]boom[/]\\x1b]0;pwned\\x07\\u202etxt.exe漢字")
        assert all(cell_len(line) == width for line in shown)
        assert "…" in shown[2] and len(status(screen)) < 300
        await pilot.press("slash", *"pwned", "enter")
        assert len(view.matches) == 1
        await settled(pilot)


def stack_result(stacks: dict[tuple[str, ...], int]) -> Result:
    entries = tuple(Entry((stack,), Stats(count)) for stack, count in sorted(stacks.items(), key=lambda item: -item[1]))
    return Result("count", "kernel", 0.0, 10.0, ("stack",), None, entries, Stats(sum(stacks.values())), None)


async def test_f_in_the_statistics_view_keyed_by_stack_opens_the_flame_graph():
    from kprobe_tui.aggregate.offer import Choice
    from kprobe_tui.aggregate.run import Sample

    stacks = guest_stacks()
    request = StatsRequest(("kmem_cache_alloc",), key="comm")
    choice = Choice("kernel", "hist", "test")
    keyed = stack_result(stacks)
    by_comm = Result("count", "kernel", 0.0, 10.0, ("comm",), None, (Entry(("dd",), Stats(3)),), Stats(3), None)
    for result, opens in ((by_comm, False), (keyed, True)):
        app = Host(StatsScreen.replay(request, Sample(result, result), [], choice))
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("f")
            await pilot.pause()
            if opens:
                [message] = app.asked
                assert message.stacks == stacks and "kmem_cache_alloc" in message.title
            else:
                assert app.asked == []
                assert any("key by stack" in notice.message for notice in app._notifications)


async def test_the_app_opens_the_flame_graph_it_is_asked_for():
    app = kernel_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await to_functions(pilot)
        app.screen.post_message(OpenFlame(guest_stacks(), "kmem_cache_alloc"))
        await until(pilot, lambda: isinstance(app.screen, FlameScreen), "the flame graph is shown")
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, FlameScreen), "escape went back")


@pytest.mark.parametrize("width", [80, 160])
def test_every_row_fills_the_width_exactly(width):
    """Cells tile: every row of the guest's graph at any zoom is exactly ``width`` cells, frames in order."""
    flame = FlameLayout(guest_stacks())
    for frame in (ROOT, *flame.row(3)[:5]):
        zoom = flame.zoom(frame)
        for depth in range(flame.depth):
            cells = flame.cells(depth, width, zoom)
            assert all(a.end <= b.first for a, b in zip(cells, cells[1:]))
            assert all(0 <= cell.first < cell.end <= width for cell in cells)


async def test_no_stacks_yet_is_an_empty_graph_every_key_still_works():
    screen, app = guest_screen({("never",): 0})
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("down", "right", "enter", "s", "slash", "a", "enter", "escape")
        assert status(screen).startswith("all · 0 (0.0% of all)")
        assert app.asked == ["back"]
