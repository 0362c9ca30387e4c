"""The statistics view's keys scroll: at 80x24 a count by comm shows some of 50 comms, and at 80x12 a histogram
per call path two of three; down brings the next key to the top, the keys scrolled past said above."""

from __future__ import annotations

from kprobe_tui.tui.widgets.stats_table import StatsTable
from tests.tui.states import kernel_app, to_stats_count, to_stats_hist_stack


def texts(table: StatsTable) -> list[str]:
    return [line.plain for line in table.lines()]


async def test_down_scrolls_the_comms_and_home_goes_back():
    app = kernel_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await to_stats_count(pilot)
        table = app.screen.query_one(StatsTable)
        first = texts(table)
        assert first[1].startswith("dd ") and first[-1].endswith(" more keys, " + first[-1].split(", ")[1])
        assert first[-1].endswith("(down)")
        await pilot.press("down", "down", "down")
        scrolled = texts(table)
        assert scrolled[1] == "… 3 keys above (up), 258 hits" and scrolled[2].startswith("cat ")
        assert len(scrolled) == len(first)  # the same rows: one key fewer, the line above instead
        await pilot.press("up")
        assert texts(table)[1].startswith("… 2 keys above") and texts(table)[2].startswith("ls ")
        await pilot.press("home")
        assert texts(table) == first
        await pilot.press("end", *["pagedown"] * 10)  # no further than the last key
        assert texts(table)[2].startswith("kworker/39:1 ")


async def test_a_histogram_per_call_path_scrolls_a_path_at_a_time():
    app = kernel_app()
    async with app.run_test(size=(80, 12)) as pilot:  # room for two of the three call paths
        await to_stats_hist_stack(pilot)
        table = app.screen.query_one(StatsTable)
        headers = [line for line in texts(table) if line.startswith("@n[")]
        assert len(headers) == 2 and texts(table)[-1] == "… 1 more keys, 3 hits (down)"
        await pilot.press("down")
        assert texts(table)[0] == "… 1 keys above (up), 7 hits"
        assert [line for line in texts(table) if line.startswith("@n[")][-1].startswith("@n[← ksys_read+0x6b")
