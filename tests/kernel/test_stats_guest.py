"""The statistics view with the kernel engine, inside the guests: hist triggers answer what the view shows,
and closing the view removes the triggers, their instance and the probes (the ``tracefs`` fixture compares
kprobe_events, dynamic_events and instances/ before and after). One targeted question: Python runs
15-25x slower here, so the view is hosted alone (no function catalog to load).
"""

from __future__ import annotations

import os

import pytest
from textual.app import App

from kprobe_tui.kernel import lifetime
from kprobe_tui.tui.navigation import Back
from kprobe_tui.tui.screens.stats import StatsRequest, StatsScreen
from tests.aggregate_cli import build, run_workload

pytestmark = pytest.mark.kernel


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    return build(tmp_path_factory.mktemp("stats") / "kpt_stats_guest")


class Host(App):
    def __init__(self, screen: StatsScreen) -> None:
        super().__init__()
        self._screen = screen

    def on_mount(self) -> None:
        self.push_screen(self._screen)

    def on_back(self, message: Back) -> None:  # the real app's navigation: escape closes the view
        self.pop_screen()


async def until(pilot, condition, what: str, seconds: float = 300) -> None:
    for _ in range(int(seconds / 0.1)):
        if condition():
            return
        await pilot.pause(0.1)
    raise AssertionError(f"never happened (in {seconds:.0f} s): {what}")


async def test_the_view_counts_per_comm_with_hist_triggers_and_leaves_nothing(tracefs, guest_sources, program):
    # hist triggers asked for: auto takes our BPF programs, which tests/tui/test_stats.py shows on uprobes
    screen = StatsScreen(StatsRequest(("work",), str(program), key="comm", engine="hist"), guest_sources)
    async with Host(screen).run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: screen.choice is not None or screen.error, "the run starts")
        assert screen.error is None, screen.error
        assert (screen.choice.engine, screen.choice.method) == ("kernel", "hist"), screen.choice
        assert "kernel engine: hist triggers aggregate in the kernel" in str(screen.query_one("#engine").render())
        ours = [name for name in os.listdir(tracefs.path("instances")) if name.startswith(f"{lifetime.run_name()}__agg")]
        assert len(ours) == 1
        target = screen.runner.run.targets.items[0]
        trigger = tracefs.path(f"instances/{ours[0]}/events/{target.group}/{target.event}/trigger").read_text()
        assert f"common_pid != {screen.runner.native_id}" in trigger  # its hist reads are never counted
        run_workload(program, "values", "100")
        await until(pilot, lambda: screen.sample is not None and screen.sample.total.count >= 100, "100 hits counted")
        assert {entry.key[0]: entry.count for entry in screen.sample.total.entries} == {"kpt-alpha": 50,
                                                                                       "kpt beta-2": 50}
        await pilot.press("escape")
        assert screen.runner.closed.wait(300)
        assert not os.path.exists(tracefs.path(f"instances/{ours[0]}"))
