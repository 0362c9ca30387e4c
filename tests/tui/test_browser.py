"""The function browser driven through Textual's Pilot on the real kernel's function list."""

from __future__ import annotations

from pathlib import Path

from kprobe_tui.kernel.catalog import Status
from kprobe_tui.kernel.sources import locate
from kprobe_tui.tui.app import KprobeTui
from kprobe_tui.tui.widgets.function_list import FunctionList


async def _loaded(pilot) -> FunctionList:
    functions = pilot.app.screen.query_one(FunctionList)
    for _ in range(200):
        if functions.rows:
            return functions
        await pilot.pause(0.05)
    raise AssertionError("the function list never loaded")


def _detail(app) -> str:
    return str(app.screen.query_one("#detail").render())


async def test_typing_filters_and_counts_matches():
    app = KprobeTui(locate())
    async with app.run_test(size=(80, 24)) as pilot:
        functions = await _loaded(pilot)
        total = len(functions.rows)
        await pilot.press("slash", *"vfs_rea")
        expected = [name for name in app.catalog.names if "vfs_rea" in name]
        assert functions.rows == expected
        assert str(app.screen.query_one("#filter-info").render()) == f"substring · {len(expected):,}/{total:,}"
        await pilot.press("d", "escape")  # back to the list, the filter kept
        assert functions.has_focus
        assert "vfs_read" in functions.rows


async def test_glob_and_fuzzy_modes():
    app = KprobeTui(locate())
    async with app.run_test(size=(80, 24)) as pilot:
        functions = await _loaded(pilot)
        await pilot.press("slash", *"tcp_v4_*")
        assert functions.rows and all(name.startswith("tcp_v4_") for name in functions.rows)
        await pilot.press("ctrl+t", "ctrl+t")  # substring (auto-glob on wildcards) -> glob -> fuzzy
        assert app.screen.mode == "fuzzy"
        await pilot.press("ctrl+a", "ctrl+k", *"tcpv4rcv")
        assert "tcp_v4_rcv" in functions.rows
        assert functions.matcher.spans("tcp_v4_rcv")  # what matched is highlighted


async def test_keyboard_and_mouse_move_the_cursor_and_the_detail_follows():
    app = KprobeTui(locate())
    async with app.run_test(size=(80, 24)) as pilot:
        functions = await _loaded(pilot)
        await pilot.press("slash", *"vfs_", "escape")
        await pilot.press("down", "down")
        assert functions.cursor == 2
        assert _detail(app).startswith(functions.rows[2])
        await pilot.press("end")
        assert functions.cursor == len(functions.rows) - 1
        await pilot.press("home")
        await pilot.click(FunctionList, offset=(5, 4))  # border row + 3 rows down
        assert functions.cursor == 3
        assert _detail(app).startswith(functions.rows[3])


async def test_detail_explains_an_ambiguous_function():
    app = KprobeTui(locate())
    async with app.run_test(size=(100, 30)) as pilot:
        functions = await _loaded(pilot)
        ambiguous = next(name for name in app.catalog.names if app.catalog.status(name) is Status.AMBIGUOUS)
        await pilot.press("slash", *ambiguous, "escape")
        functions.action_jump(functions.rows.index(ambiguous))
        await pilot.pause()
        detail = _detail(app)
        count = len(app.catalog.function(ambiguous).symbols)
        assert "ambiguous" in detail and f"{count} symbols share this name" in detail


SNAPSHOT_61 = Path(__file__).parents[1] / "fixtures" / "snapshots" / "debian-6.1.tar.gz"


def _app_on_snapshot() -> KprobeTui:
    from kprobe_tui.kernel.snapshot import open_snapshot

    return KprobeTui(open_snapshot(SNAPSHOT_61))


async def test_detail_explains_a_blacklisted_function():
    app = _app_on_snapshot()
    async with app.run_test(size=(80, 24)) as pilot:
        functions = await _loaded(pilot)
        await pilot.press("slash", *"do_int3", "escape")
        assert functions.current == "do_int3"
        for _ in range(100):  # prototypes arrive once BTF is loaded in the background
            if app.catalog.details_ready:
                break
            await pilot.pause(0.05)
        await pilot.pause()
        detail = _detail(app)
        assert "blacklisted" in detail and "kernel refuses to probe it" in detail
        assert "bool do_int3(struct pt_regs *regs)" in detail  # as arch/x86/kernel/traps.c declares it


async def test_enter_opens_the_source_of_a_user_function(tmp_path, monkeypatch):
    """-x mode: the browser lists the program's functions; Enter shows its probeable lines."""
    import subprocess

    from kprobe_tui.debuginfo.lines import LineSpec, find_line_range
    from kprobe_tui.debuginfo.scope import open_debuginfo
    from kprobe_tui.probes.binary import BinaryCatalog
    from kprobe_tui.tui.screens.builder import ProbeBuilderScreen
    from kprobe_tui.tui.screens.source import SourceScreen
    from kprobe_tui.tui.widgets.source_view import SourceView

    c_dir = Path(__file__).parents[1] / "debuginfo" / "c"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    binary = tmp_path / "probed"
    subprocess.run(["gcc", "-O2", "-gdwarf-5", "-I", str(c_dir), "-o", str(binary), str(c_dir / "probed.c")], check=True)
    expected = find_line_range(open_debuginfo(binary=str(binary)), LineSpec.parse("count_ready"))
    app = KprobeTui(locate(), BinaryCatalog(str(binary)))
    async with app.run_test(size=(100, 30)) as pilot:
        functions = await _loaded(pilot)
        await pilot.press("slash", *"count_ready", "escape")
        assert functions.current == "count_ready.constprop.0"  # gcc -O2 left only a clone
        await pilot.press("enter")  # a clone opens the source of the function it was made from
        screen = app.screen
        assert isinstance(screen, SourceScreen)
        for _ in range(3):
            await app.workers.wait_for_complete()
            await pilot.pause()
        assert screen.query_one(SourceView).probeable == set(expected.lines)
        # Enter on a probeable line: the builder, set up for a line probe numbered as perf -L numbers it
        await pilot.press("n")  # the second probeable line
        line = screen.cursor_line
        assert line == sorted(screen.query_one(SourceView).probeable)[1]
        await pilot.press("enter")
        builder = app.screen
        assert isinstance(builder, ProbeBuilderScreen) and builder.function == "count_ready"
        assert builder.query_one("#kind").value == "line"
        assert builder.query_one("#number").value == str(line - expected.offset)
        await pilot.press("escape", "escape", "escape")  # out of Args, back from the builder, from the source
        assert app.screen.query_one(FunctionList) is functions


async def test_the_why_pane_shows_the_whole_reason_at_80x24():
    """The longest reasons (a freed __init function, a breakpoint-only one) wrap to the end within the pane
    at 80 columns: the last words are on screen, not cut mid-sentence."""
    from tests.tui.states import catalog_loaded, kernel_app

    app = kernel_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await catalog_loaded(pilot)
        for name, last_words in (("aio_setup", "leaves it out too)"), (".E_copy", "with more overhead")):
            await pilot.press("slash", "ctrl+a", "ctrl+k", *name, "escape")
            await pilot.pause()
            await pilot.pause(0.2)
            screen = _screen_text(app)
            assert last_words in screen, screen


async def test_the_whole_kernels_count_is_on_screen_beside_the_filter():
    """Unfiltered, a kernel's count (the 6.1 snapshot's 49,798) is whole beside the filter at 80 columns, not
    cut to "substring ·"; room is kept for six digits (121k symbols in this host's 6.18)."""
    from tests.tui.states import catalog_loaded, kernel_app

    app = kernel_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await catalog_loaded(pilot)
        await pilot.pause()
        total = len(app.catalog.names)
        assert f"substring · {total:,}/{total:,}" in _screen_text(app)


async def test_a_filter_that_matches_nothing_says_so_whatever_detail_was_on_its_way():
    """The detail of a function the filter passed over comes late (a slow DWARF or BTF read: 0.3 s here); the
    filter matching nothing by then, the pane says so instead of describing a function no longer listed."""
    import time

    from tests.tui.states import catalog_loaded, kernel_app, settled

    app = kernel_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await catalog_loaded(pilot)
        read = app.catalog.function

        def slow_read(name):
            time.sleep(0.3)
            return read(name)

        app.catalog.function = slow_read
        await pilot.press("slash", *"vfs_read")
        await pilot.press(*"zzz")
        await settled(pilot)
        await pilot.pause(0.5)
        assert app.screen.query_one(FunctionList).rows == []
        assert _detail(app) == "No function matches the filter."


def _screen_text(app) -> str:
    """The screen as a person sees it, from the screenshot Textual exports (what fits is what is drawn)."""
    import html
    import re

    svg = app.export_screenshot()
    lines: dict[float, str] = {}
    for y, text in re.findall(r'<text[^>]*y="([\d.]+)"[^>]*>(.*?)</text>', svg):
        lines[float(y)] = lines.get(float(y), "") + html.unescape(re.sub("<[^>]+>", "", text))
    return "\n".join(lines[y].replace("\xa0", " ") for y in sorted(lines))
