"""The statistics view under Pilot, on real uprobes on tests/live/c/aggregate.c (known behaviour).

This kernel has no hist triggers: the view runs our BPF engine where it can say the question, else the
user-space engine (and uprobe_profile for calls counted per function), as the CLI does on the same program (tests/live/test_aggregate.py). Every
view is closed at the end of its test and nothing of it may stay in the kernel.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path
from unittest import mock

import pytest

from kprobe_tui.kernel import access, lifetime
from kprobe_tui.kernel.events import Events
from kprobe_tui.kernel.sources import locate
from kprobe_tui.kernel.tracefs import Tracefs
from kprobe_tui.probes.binary import BinaryCatalog
from kprobe_tui.probes.symbols import ElfSymbols
from kprobe_tui.tui.app import KprobeTui
from kprobe_tui.tui.navigation import ShowEvents
from kprobe_tui.tui.screens.probes import ProbesScreen
from kprobe_tui.tui.screens.stats import StatsRequest, StatsScreen
from kprobe_tui.tui.tracing import RunTracing
from kprobe_tui.tui.widgets.function_list import FunctionList
from kprobe_tui.tui.widgets.stats_table import StatsTable
from tests.aggregate_cli import LEN_VALUES, build, expected_len_buckets, run_workload
from tests.live.test_aggregate import leftovers
from tests.tui.states import until

pytestmark = pytest.mark.live

ADMIN = f"kptstats{os.getpid()}"  # a probe as a user made it earlier (the view makes its own beside it)


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    return build(tmp_path_factory.mktemp("stats") / "kpt_stats_tui")


@pytest.fixture
def clean(tracefs_root):
    """After the test: nothing of this run (probes, instances) and nothing on the program is left."""
    yield
    assert leftovers(tracefs_root, lifetime.run_name()) == []


@pytest.fixture
def work_probe(program, tracefs_root, clean):
    """``ADMIN/work`` capturing len and port, as the builder or perf probe makes it."""
    top = Tracefs(tracefs_root)
    offset = ElfSymbols(program).function("work").file_offset
    top.write("uprobe_events", f"p:{ADMIN}/work {program}:0x{offset:x} len=%di:s64 port=%si:u16\n")
    try:
        yield program
    finally:
        events = Events(top)
        for event in events.list():
            if event.group == ADMIN:
                events.delete(event)


async def running(pilot) -> StatsScreen:
    """The view on top, its run started (probes made, engine chosen)."""
    await until(pilot, lambda: isinstance(pilot.app.screen, StatsScreen), "the view opens")
    screen = pilot.app.screen
    assert isinstance(screen, StatsScreen), screen
    await until(pilot, lambda: screen.choice is not None or screen.error, "the run starts")
    assert screen.error is None, screen.error
    return screen


async def answered(pilot, screen: StatsScreen, count: int) -> None:
    await until(pilot, lambda: screen.sample is not None and screen.sample.total.count >= count,
                f"{count} hits counted")
    assert screen.sample.total.count == count


def counts(screen: StatsScreen) -> dict:
    return {entry.key[0] if len(entry.key) == 1 else entry.key: entry.count for entry in screen.sample.total.entries}


def buckets(screen: StatsScreen) -> dict:
    return {(b.low, b.high): b.count for b in screen.sample.total.buckets if b.count}


def drawn(screen: StatsScreen) -> str:
    return "\n".join(line.plain for line in screen.query_one(StatsTable).lines())


async def closed(pilot, screen: StatsScreen) -> None:
    await pilot.press("escape")
    assert pilot.app.screen is not screen
    assert screen.runner.closed.wait(30)


async def test_from_the_probes_panel_counts_per_comm_then_per_captured_field(work_probe, tracefs_root):
    """``a`` on a probe: count by comm (the program renames itself half way), then ``k`` to pid and to
    len, each answer exact; the probe the view made goes when it closes, the user's stays."""
    app = KprobeTui(locate(), BinaryCatalog(str(work_probe)))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("l")
        panel = app.screen
        assert isinstance(panel, ProbesScreen)
        await pilot.press("slash", *ADMIN, "enter")
        await until(pilot, lambda: list(panel.shown) == [f"{ADMIN}/work"], "the panel shows the probe")
        await pilot.press("a")
        screen = await running(pilot)
        assert screen.choice.method == "bpf"  # no hist triggers here: our BPF program counts (never this process)
        assert "kernel engine: a BPF program of ours" in str(screen.query_one("#engine").render())
        run_workload(work_probe, "values", "100")
        await answered(pilot, screen, 100)
        assert counts(screen) == {"kpt-alpha": 50, "kpt beta-2": 50}
        assert "kpt-alpha" in drawn(screen) and "kpt beta-2" in drawn(screen)

        await pilot.press("k", "k")  # comm -> pid -> len
        assert screen.request.key == "len"
        await running(pilot)
        run_workload(work_probe, "values", "100")
        await answered(pilot, screen, 100)
        assert counts(screen) == LEN_VALUES
        assert drawn(screen).splitlines()[0].split() == ["LEN", "COUNT"]
        await closed(pilot, screen)
    assert [e.full_name for e in Events(Tracefs(tracefs_root)).list() if str(work_probe) in e.definition] == [
        f"{ADMIN}/work"]


async def test_from_the_events_screen_the_probe_being_tailed(work_probe, tracefs_root):
    """``a`` while tailing one probe: the view of that probe, counting by comm; the tail goes on beside it."""
    from kprobe_tui.tui.screens.events import EventsScreen

    app = KprobeTui(locate(), BinaryCatalog(str(work_probe)))
    async with app.run_test(size=(80, 24)) as pilot:
        # The kernel is slow to make the tail's instance (as when another run's instance is going
        # away: CI saw it): ``a`` pressed meanwhile is answered once the tail is up, not dropped.
        with RunTracing.of(app, Tracefs(tracefs_root))._lock:
            app.post_message(ShowEvents([f"{ADMIN}/work"]))
            await until(pilot, lambda: isinstance(app.screen, EventsScreen), "the events screen opens")
            events = app.screen
            await pilot.press("a")
            assert events.starting and app.screen is events
        screen = await running(pilot)
        assert screen.request.spec == ("work", "len=%di:s64", "port=%si:u16") and screen.request.key == "comm"
        run_workload(work_probe, "values", "100")
        await answered(pilot, screen, 100)
        assert counts(screen) == {"kpt-alpha": 50, "kpt beta-2": 50}
        await closed(pilot, screen)
        assert app.screen is events
        await until(pilot, lambda: events.store.total == 100, "the tail's own 100 events")


async def test_histogram_of_a_field_log2_then_linear(work_probe):
    """``v``: a histogram of len in bpftrace's log2 buckets; ``b``: linear over the values seen."""
    app = KprobeTui(locate(), BinaryCatalog(str(work_probe)))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("l")
        panel = app.screen
        await pilot.press("slash", *ADMIN, "enter")
        await until(pilot, lambda: list(panel.shown) == [f"{ADMIN}/work"], "the panel shows the probe")
        await pilot.press("a", "k", "k", "k", "k", "k", "v")  # key: comm -> pid -> len -> port -> stack -> none; value: len
        screen = await running(pilot)
        assert (screen.request.key, screen.request.value) == (None, "len")
        run_workload(work_probe, "values", "100")
        await answered(pilot, screen, 100)
        assert buckets(screen) == expected_len_buckets()
        assert "[256, 512)" in drawn(screen) and "|@@@" in drawn(screen)

        await pilot.press("b")
        assert screen.request.linear is not None
        assert (screen.request.linear.low, screen.request.linear.high, screen.request.linear.step) == (-200, 800, 100)
        await running(pilot)
        run_workload(work_probe, "values", "100")
        await answered(pilot, screen, 100)
        assert buckets(screen) == {(low, low + 100): 10 for low in range(-200, 800, 100)}

        # r: a range of one's own, as bpftrace's lhist(len, 0, 500, 250); a bad one is said and kept to edit
        await pilot.press("r")
        box = screen.query_one("#linear-range")
        assert box.has_focus and box.value == "-200,800,100"
        await pilot.press("ctrl+u", *"0,500,7", "enter")
        assert box.has_focus and screen.request.linear.step == 100
        assert any("MAX-MIN is not a multiple of STEP" in note.message for note in app._notifications)
        await pilot.press("backspace", *"250", "enter")
        assert not box.has_focus and not box.display
        assert (screen.request.linear.low, screen.request.linear.high, screen.request.linear.step) == (0, 500, 250)
        await running(pilot)
        run_workload(work_probe, "values", "100")
        await answered(pilot, screen, 100)
        assert buckets(screen) == {(None, 0): 20, (0, 250): 30, (250, 500): 20, (500, None): 30}
        await pilot.press("r", "escape")  # escape in the box keeps the scale and the view
        assert app.screen is screen and not box.display and screen.request.linear.step == 250
        await closed(pilot, screen)


async def test_latency_from_the_function_browser_lands_in_its_log2_bucket(program, clean):
    """``L`` on nap(): 5 calls of 20 ms each are 5 in [16K, 32K) microseconds."""
    app = KprobeTui(locate(), BinaryCatalog(str(program)))
    async with app.run_test(size=(80, 24)) as pilot:
        functions = app.screen.query_one(FunctionList)
        await until(pilot, lambda: functions.rows, "the function list loads")
        await pilot.press("slash", *"nap", "escape")  # escape: back to the list, the filter kept
        assert functions.current == "nap"
        await pilot.press("L")
        screen = await running(pilot)
        assert screen.request.kind == "latency"
        run_workload(program, "sleep", "5", "20")
        await answered(pilot, screen, 5)
        assert buckets(screen) == {(16384, 32768): 5}
        assert "[16K, 32K)" in drawn(screen)
        assert str(screen.query_one("#summary").render()).startswith("count 5, avg 2")
        await closed(pilot, screen)


async def test_count_calls_of_the_filter_glob_per_function(program, clean):
    """``c`` with the filter ``[nw]*``: calls of every match counted by uprobe_profile (no events)."""
    app = KprobeTui(locate(), BinaryCatalog(str(program)))
    async with app.run_test(size=(80, 24)) as pilot:
        functions = app.screen.query_one(FunctionList)
        await until(pilot, lambda: functions.rows, "the function list loads")
        await pilot.press("slash", *"[nw]*", "escape", "c")
        screen = await running(pilot)
        assert screen.request.spec == ("[nw]*",) and screen.request.key == "probe"
        assert screen.choice.engine == "kernel" and screen.choice.method == "profile"
        run_workload(program, "values", "100")
        await answered(pilot, screen, 100)
        assert counts(screen) == {"work": 100}
        await closed(pilot, screen)


async def test_count_calls_of_the_one_function_the_filter_matches_per_process(program, clean):
    """``c`` when the filter leaves one function: its calls per process, the lab's question, from the start."""
    app = KprobeTui(locate(), BinaryCatalog(str(program)))
    async with app.run_test(size=(80, 24)) as pilot:
        functions = app.screen.query_one(FunctionList)
        await until(pilot, lambda: functions.rows, "the function list loads")
        await pilot.press("slash", *"wor", "escape", "c")
        screen = await running(pilot)
        assert screen.request.spec == ("work",) and screen.request.key == "comm"
        run_workload(program, "values", "100")
        await answered(pilot, screen, 100)
        assert counts(screen) == {"kpt-alpha": 50, "kpt beta-2": 50}  # the workload's threads
        await closed(pilot, screen)


async def test_lab_mode_offers_the_command_for_an_administrator(program, clean):
    """In lab mode nothing runs: the command that answers the same question is copied instead."""
    why = "you are uid 1000 and uprobe_events is root's"
    lab = access.Access(can_create=access.refused(why), can_list=access.ALLOWED, can_tail=access.ALLOWED,
                        can_aggregate=access.refused(f"an aggregation makes probes of its own, and {why}"))
    with mock.patch.object(access, "decide", return_value=lab):
        app = KprobeTui(locate(), BinaryCatalog(str(program)))
    async with app.run_test(size=(80, 24)) as pilot:
        functions = app.screen.query_one(FunctionList)
        await until(pilot, lambda: functions.rows, "the function list loads")
        await pilot.press("slash", *"nap", "escape", "L")
        assert not isinstance(app.screen, StatsScreen)
        assert shlex.split(app.clipboard) == ["sudo", "kprobe-tui", "latency", "-x", str(program), "nap"]
        await pilot.press("c")
        assert shlex.split(app.clipboard) == ["sudo", "kprobe-tui", "count", "-x", str(program), "nap", "--by", "comm"]
    assert not [line for line in (Path(locate().tracefs) / "uprobe_events").read_text().splitlines()
                if str(program) in line]


async def test_a_flood_leaves_the_view_responsive(program, clean):
    """Tens of thousands of hits a second: keys still take effect at once and a new run still starts."""
    app = KprobeTui(locate(), BinaryCatalog(str(program)))
    async with app.run_test(size=(80, 24)) as pilot:
        functions = app.screen.query_one(FunctionList)
        await until(pilot, lambda: functions.rows, "the function list loads")
        app.push_screen(StatsScreen(StatsRequest(("work",), str(program), key="comm"), app.sources))
        screen = await running(pilot)
        # calls enough for minutes: between two runs, with no probe on it, it makes ~300M calls a second
        flood = subprocess.Popen([str(program), "flood", "1000000000000"], stdout=subprocess.DEVNULL)
        try:
            await until(pilot, lambda: screen.sample is not None and screen.sample.rate > 10_000,
                        "a flood of more than 10k hits/s")
            await pilot.press("i")
            assert "last second" in str(screen.query_one("#title").render())
            await pilot.press("k")
            assert screen.request.key == "pid"
            await running(pilot)
            await until(pilot, lambda: screen.sample is not None and screen.sample.interval.count
                        and screen.sample.interval.key_names == ("pid",), "the new run's answer")
            assert set(counts(screen)) == {flood.pid}
        finally:
            flood.kill()
            flood.wait()
        await closed(pilot, screen)
