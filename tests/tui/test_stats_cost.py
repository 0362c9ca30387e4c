"""The statistics view says what counting stacks will cost before it starts (issue 28), under Pilot, on a real
uprobe: a program calling work() 50,000 times a second (tests/live/test_stack_cost_live.py's) is estimated above
a quarter of a CPU, so ``k`` to the stack key shows the estimate and starts nothing until ``y``; nothing of the
view, nor of its measuring count, stays in the kernel once it closes."""

from __future__ import annotations

import subprocess

import pytest

from kprobe_tui.kernel.sources import locate
from kprobe_tui.probes.binary import BinaryCatalog
from kprobe_tui.tui.app import KprobeTui
from kprobe_tui.tui.screens.stats import StatsRequest, StatsScreen
from tests.live.test_stack_cost_live import paced  # noqa: F401 (a fixture)
from tests.tui.states import until
from tests.tui.test_stats import clean, closed, running  # noqa: F401 (clean: a fixture)

pytestmark = pytest.mark.live


async def test_a_costly_stack_count_waits_for_y_and_says_why(paced, clean):  # noqa: F811
    program = subprocess.Popen([str(paced), "50000", "30"], stdout=subprocess.DEVNULL)
    app = KprobeTui(locate(), BinaryCatalog(str(paced)))
    try:
        async with app.run_test(size=(120, 30)) as pilot:
            app.push_screen(StatsScreen(StatsRequest(("work",), str(paced), key="comm"), app.sources))
            screen = await running(pilot)
            await pilot.press("k", "k")  # comm -> pid -> stack
            assert screen.request.key == "stack"
            await until(pilot, lambda: screen.cost is not None, "the estimate is said")
            assert screen.cost.high and screen.cost.engine == "user" and screen.choice is None
            line = str(screen.query_one("#engine").render())
            assert line.startswith("not started: work: ~") and "(y: count anyway, k: another key)" in line
            # at most the program's pace; less when the runs before (by comm, by pid: the user-space engine) slowed it
            assert 10_000 < screen.cost.hits_per_second < 50_000 * 1.5
            assert any(note.title == "Costly" for note in app._notifications)
            await pilot.pause(1.5)
            assert screen.runner.run is None and screen.choice is None  # nothing starts by itself
            await pilot.press("y")
            screen = await running(pilot)
            assert screen.choice.engine == "user"
            await closed(pilot, screen)
    finally:
        program.kill()
        program.wait()
