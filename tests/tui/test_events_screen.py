"""The events screen under Pilot: follow, pause, filter, detail and a flood."""

from __future__ import annotations

import subprocess
from collections import deque
from pathlib import Path

import psutil
import pytest
from textual.app import App
from textual.widgets import Sparkline

from kprobe_tui.kernel import lifetime
from kprobe_tui.kernel.tracefs import Tracefs
from kprobe_tui.stream.parser import LineParser
from kprobe_tui.tui.screens.events import EventsScreen
from kprobe_tui.tui.widgets.event_table import EventTable
from tests.conftest import FIXTURES
from tests.live.test_tail import GROUP, probed  # noqa: F401  (the fixture: a uprobe on hit())


class Host(App):
    """The smallest app around one screen (the real app is kprobe_tui.tui.app)."""

    def __init__(self, screen: EventsScreen) -> None:
        super().__init__()
        self._screen = screen

    def on_mount(self) -> None:
        self.push_screen(self._screen)


async def wait_for(pilot, condition, rounds: int = 400) -> None:
    """Let the app run until ``condition()`` holds (the reader thread works meanwhile)."""
    for _ in range(rounds):
        if condition():
            return
        await pilot.pause(0.025)
    raise AssertionError("condition never held")


def status(app) -> str:
    return str(app.screen.query_one("#status").render())


def run(binary: Path, calls: int, quiet: bool = False) -> None:
    subprocess.run([str(binary), str(calls)] + (["quiet"] if quiet else []), check=True, capture_output=True)


@pytest.mark.live
async def test_follow_filter_detail_and_pause(probed, tracefs_root, tmp_path):  # noqa: F811
    top, binary = probed
    screen = EventsScreen([f"{GROUP}/hit"], top, export_dir=tmp_path)
    app = Host(screen)
    async with app.run_test(size=(100, 30)) as pilot:
        store, table = screen.store, screen.query_one(EventTable)
        await wait_for(pilot, lambda: screen.session is not None)  # the session starts in a worker
        run(binary, 8)
        await wait_for(pilot, lambda: table.cursor == 7)
        assert table.following and "following" in status(app)

        await pilot.press("up")
        assert not table.following and table.cursor == 6
        run(binary, 8)
        await wait_for(pilot, lambda: store.total == 16 and "8 new" in status(app))
        assert table.cursor == 6
        await pilot.press("end")
        assert table.following and table.cursor == 15 and "following" in status(app)

        await pilot.press("slash", *"n >= 104 && s ~ \"*a*\"", "enter")
        await wait_for(pilot, lambda: "kernel:" in str(screen.query_one("#filter-side").render()))
        assert [ev.args["n"] for ev in store.view_rows(0, 99)] == [104, 105, 106, 104, 105, 106]
        assert f"kernel: {GROUP}/hit" in str(screen.query_one("#filter-side").render())
        instance = tracefs_root / f"instances/{screen.session.instance.name}"
        excluded = screen.session.instance.excluded_threads
        assert screen.session.reader.native_id in excluded  # the reader never records itself
        own = " && ".join(f"common_pid != {tid}" for tid in excluded)
        assert (instance / f"events/{GROUP}/hit/filter").read_text().strip() == own + ' && ((n >= 104 && s ~ "*a*"))'

        await pilot.press("slash", "ctrl+a", "ctrl+k", *"n >> 3", "enter")
        await wait_for(pilot, lambda: screen.query_one("#filter-error").has_class("shown"))
        error = str(screen.query_one("#filter-error").render())
        assert "expected a number or a quoted string" in error and error.splitlines()[2] == "   ^"
        assert store.view_len() == 6  # the old filter stays

        await pilot.press("escape", "home", "d")
        detail = str(screen.query_one("#detail-text").render())
        assert "n = 104" in detail and "s = alpha" in detail and "arr = {4,-4,12,42}" in detail

        await pilot.press("p")
        await wait_for(pilot, lambda: "PAUSED" in status(app))
        assert (instance / "tracing_on").read_text().strip() == "0"
        run(binary, 4)
        await pilot.pause(0.2)
        assert store.total == 16
        await pilot.press("p")
        await wait_for(pilot, lambda: "PAUSED" not in status(app))
        assert (instance / "tracing_on").read_text().strip() == "1"

        await pilot.press("x")
        await wait_for(pilot, lambda: list(tmp_path.glob("kprobe-tui-events-*.jsonl")))
        exported = list(tmp_path.glob("kprobe-tui-events-*.jsonl"))
        assert len(exported) == 1 and len(exported[0].read_text().splitlines()) == 6

        await pilot.press("s")  # kernel stacks on, for new events
        await wait_for(pilot, lambda: screen.session.stacktrace)
        assert (instance / "options/stacktrace").read_text().strip() == "1"
        run(binary, 5)
        await wait_for(pilot, lambda: store.view_len() == 7)
        await pilot.press("end")
        detail = str(screen.query_one("#detail-text").render())
        assert "kernel stack:" in detail and "uprobe_dispatcher" in detail and "n = 104" in detail

        await wait_for(pilot, lambda: max(screen.rates.get("hit", [0])) > 0)
        assert screen.query_one(Sparkline).data and "hit" in str(screen.query_one(".rate-label").render())
    assert not instance.exists()


@pytest.mark.live
async def test_flood_stays_responsive_with_lost_monotonic_and_memory_bounded(probed, tracefs_root):  # noqa: F811
    top, binary = probed
    screen = EventsScreen([f"{GROUP}/hit"], top, max_events=10_000)
    app = Host(screen)
    process = psutil.Process()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: screen.session is not None)  # the session starts in a worker
        screen.session.instance.tracefs.write("buffer_size_kb", "64", append=False)
        table = screen.query_one(EventTable)
        rss_before = process.memory_info().rss
        flood = subprocess.Popen([str(binary), "300000", "quiet"])
        lost_seen, pauses = [], 0
        try:
            await wait_for(pilot, lambda: screen.store.total >= 2)  # "up" needs a row above
            while flood.poll() is None:
                await pilot.press("p")  # each key must take effect while events pour in
                pauses += 1
                await wait_for(pilot, lambda pauses=pauses: screen.session.paused == (pauses % 2 == 1))
                await pilot.press("up")
                assert not table.following
                await pilot.press("end")
                assert table.following
                lost_seen.append(screen.lost)
                await pilot.pause(0.05)
        finally:
            flood.wait()
        if screen.session.paused:
            await pilot.press("p")
            await wait_for(pilot, lambda: not screen.session.paused)
        await wait_for(pilot, lambda: screen.store.total > 0)
        lost_seen.append(screen.lost)
        assert pauses >= 2 and lost_seen == sorted(lost_seen)
        assert len(screen.store) <= 10_000
        assert process.memory_info().rss - rss_before < 80 * 2**20
        instance = screen.session.instance.tracefs.root
    assert not instance.exists()


@pytest.mark.live
async def test_an_event_that_does_not_exist_is_reported_not_fatal(tracefs_root):
    screen = EventsScreen(["kptailtest_nosuch/none"], Tracefs(tracefs_root))
    app = Host(screen)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: not screen.starting)  # the session starts (or not) in a worker
        assert screen.session is None and "stopped" in status(app)
        assert any("no probe event matches 'kptailtest_nosuch/none'" in n.message for n in app._notifications)
        await pilot.press("p", "slash", *'n == 1', "enter")  # still usable
        assert screen.store.filtered
    assert not (tracefs_root / "instances" / lifetime.run_name()).exists()


def replay_app() -> Host:
    lines = []
    for name in ("uprobe_plain.txt", "uprobe_tgid_stack.txt"):
        lines += (FIXTURES / "trace_lines" / name).read_text().splitlines()
    parser = LineParser()
    return Host(EventsScreen.replay(parser.feed(lines) + parser.flush()))


async def test_replay_filter_and_one_column_per_argument():
    app = replay_app()
    async with app.run_test(size=(80, 24)) as pilot:
        screen = app.screen
        assert screen.store.view_len() == 15 and "replay" in status(app)
        await pilot.press("slash", *'event == "ev"', "enter")
        assert screen.store.view_len() == 5
        table = screen.query_one(EventTable)
        header = table.render_line(0).text
        assert header.split()[:9] == ["TIME", "CPU", "COMM", "PID", "EVENT", "N", "NX", "S", "C"]
        await pilot.press("home")
        assert table.render_line(1).text.split()[:7] == ["+0.000009", "1", "a-b", "c", "8189", "ev", "100"]



async def test_a_rate_shown_again_before_its_row_is_mounted_updates_it():
    """Two rate updates in one turn of the loop (a slow guest's reader sent them): the second finds the
    row it mounted a moment ago and updates it, where a query for the row's label found nothing."""
    app = replay_app()
    async with app.run_test(size=(80, 24)) as pilot:
        screen = app.screen
        screen.rates["ev"] = deque([0.0, 3.0], maxlen=2)
        screen._show_rates()
        screen.rates["ev"].append(7.0)
        screen._show_rates()
        await pilot.pause()
        assert "ev 7/s" in str(screen.query_one(".rate-label").render())
        assert screen.query_one(Sparkline).data == [3.0, 7.0]



async def test_t_repaints_every_row_in_the_other_time_mode_and_end_follows_again():
    """The table's time mode and following are reactives: changing one repaints the rows (t) or tells
    the screen (following: the status line), with no call to refresh or post by hand."""
    app = replay_app()
    async with app.run_test(size=(100, 30)) as pilot:
        screen = app.screen
        table = screen.query_one(EventTable)
        first = screen.store.view_row(0)
        absolute = f"{first.ts:12.6f}".strip()
        assert absolute not in app.export_screenshot()  # relative times at first
        await pilot.press("t")
        await pilot.pause()
        assert table.absolute_time and absolute in app.export_screenshot()
        await pilot.press("home")
        assert not table.following and "new (End: follow)" in status(app)
        await pilot.press("end")
        assert table.following and "following" in status(app)
