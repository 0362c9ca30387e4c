"""The probes panel under Pilot, on real uprobes: one made by "someone else", one made by this run.

Others' probes need a second, explicit press to delete; ours switch on and off in this run's
trace instance, are edited through the builder (recreated, the old one deleted) and deleted.
Hit counts come from the real uprobe_profile after the program runs.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest
from textual.widgets import DataTable

from kprobe_tui import blocking
from kprobe_tui.kernel import lifetime
from kprobe_tui.kernel.events import Events
from kprobe_tui.kernel.sources import locate
from kprobe_tui.kernel.tracefs import Tracefs
from kprobe_tui.probes.binary import BinaryCatalog
from kprobe_tui.probes.symbols import ElfSymbols
from kprobe_tui.tui.app import KprobeTui
from kprobe_tui.tui.screens.builder import EditBuilder
from kprobe_tui.tui.screens.events import EventsScreen
from kprobe_tui.tui.screens.probes import ProbesScreen
from tests.tui.uprobes import uprobes_on

pytestmark = pytest.mark.live

C_PROGRAM = Path(__file__).parents[1] / "live" / "c" / "basic.c"
FIXED_DIR = Path("/tmp/kprobe-tui-probes-panel-test")  # its own: uprobe_events lines on it are this file's
OTHER = "kptuiadmin"  # a group as an administrator's perf probe would make it


@pytest.fixture(scope="module")
def prog() -> Path:
    FIXED_DIR.mkdir(exist_ok=True)
    out = FIXED_DIR / "prog"
    subprocess.run(["gcc", "-O1", "-g", "-o", str(out), str(C_PROGRAM)], check=True)
    return out



@pytest.fixture
def probes(prog, tracefs_root):
    """``kptuiadmin/add3`` (someone else's) and ``kptui_<pid>/negate`` (this run's) on the program."""
    top = Tracefs(tracefs_root)
    symbols = ElfSymbols(prog)
    mine = lifetime.run_name()
    top.write("uprobe_events", f"p:{OTHER}/add3 {prog}:0x{symbols.function('add3').file_offset:x} a=%di:s64\n")
    top.write("uprobe_events", f"p:{mine}/negate {prog}:0x{symbols.function('negate').file_offset:x} x=%di:s32\n")
    try:
        yield prog
    finally:
        lifetime.undo.run_all()  # what the end of the run does: our instance and our probes go
        events = Events(top)
        for event in events.list():
            if event.group in (OTHER, mine) or str(prog) in event.definition:
                events.delete(event)
        assert uprobes_on(tracefs_root, prog) == []
        assert mine not in os.listdir(tracefs_root / "instances")


async def wait_for(pilot, condition, rounds: int = 300) -> None:
    for _ in range(rounds):
        if condition():
            return
        await pilot.pause(0.05)
    raise AssertionError("condition never held")


def cell(screen: ProbesScreen, name: str, column: str) -> str:
    table = screen.query_one(DataTable)
    value = table.get_cell(name, column)
    return getattr(value, "plain", value)


def message(screen: ProbesScreen) -> str:
    return str(screen.query_one("#message").render())


async def select(pilot, screen: ProbesScreen, name: str) -> None:
    table = screen.query_one(DataTable)
    await wait_for(pilot, lambda: name in screen.shown)
    table.move_cursor(row=table.get_row_index(name))
    await pilot.pause()
    assert screen.current().full_name == name


async def open_panel(pilot) -> ProbesScreen:
    await pilot.press("l")
    screen = pilot.app.screen
    assert isinstance(screen, ProbesScreen)
    return screen


async def test_others_need_a_second_press_ours_switch_on_off_and_count_hits(probes, tracefs_root):
    prog = probes
    mine = f"{lifetime.run_name()}/negate"
    app = KprobeTui(locate(), BinaryCatalog(prog))
    async with app.run_test(size=(100, 30)) as pilot:
        panel = await open_panel(pilot)
        await select(pilot, panel, f"{OTHER}/add3")
        assert cell(panel, f"{OTHER}/add3", "mark") == "·" and cell(panel, mine, "mark") == "●"
        assert "someone else" in str(panel.query_one("#detail").render())

        top = Tracefs(tracefs_root)
        with blocking.knowingly():  # the test, on the app's thread
            top.write(f"events/{OTHER}/add3/enable", "1", append=False)  # as its owner would
        await wait_for(pilot, lambda: cell(panel, f"{OTHER}/add3", "on") == "top")
        await pilot.press("d")  # someone else's: refused, with what to press to insist
        assert message(panel) == (f"this probe belongs to group {OTHER}, made by someone else; "
                                  "press d again to delete it anyway")
        assert any(f"{OTHER}/add3" in line for line in uprobes_on(tracefs_root, prog))
        await pilot.press("d")
        await wait_for(pilot, lambda: message(panel).startswith("deleted"))  # in a worker
        assert message(panel) == f"deleted {OTHER}/add3"  # switched off in the top buffer first
        assert not any(f"{OTHER}/add3" in line for line in uprobes_on(tracefs_root, prog))
        await wait_for(pilot, lambda: f"{OTHER}/add3" not in panel.shown)

        # Ours: nothing records yet, so switching it on tails it in this run's instance.
        await select(pilot, panel, mine)
        await pilot.press("space")
        await wait_for(pilot, lambda: isinstance(app.screen, EventsScreen) and app.screen.session is not None)
        enable = tracefs_root / f"instances/{lifetime.run_name()}/events/{mine}/enable"
        assert enable.read_text().strip() == "1"
        instance = app.tracing.session.instance  # the run's session: the app's, that every screen asks
        assert tuple(mine.split("/")) in instance.enabled
        panel = await open_panel(pilot)
        await select(pilot, panel, mine)
        await wait_for(pilot, lambda: cell(panel, mine, "on") == "run")
        for calls in range(3):
            await asyncio.to_thread(subprocess.run, [str(prog), str(calls)], check=True, capture_output=True)
        await wait_for(pilot, lambda: cell(panel, mine, "hits") == "3")
        await pilot.press("space")
        await wait_for(pilot, lambda: cell(panel, mine, "on") == "off")
        assert enable.read_text().strip() == "0"
        assert tuple(mine.split("/")) not in instance.enabled  # what the instance says is on stays right
        await pilot.press("space")
        await wait_for(pilot, lambda: cell(panel, mine, "on") == "run")
        assert enable.read_text().strip() == "1" and tuple(mine.split("/")) in instance.enabled

        await pilot.press("d")  # ours: disabled in our instance first
        await wait_for(pilot, lambda: message(panel).startswith("deleted"))
        assert message(panel) == f"deleted {mine}"
        assert tuple(mine.split("/")) not in instance.enabled
        assert uprobes_on(tracefs_root, prog) == []
        assert not enable.exists()
        await pilot.press("e")  # back to the events screen that records, not a second one
        await wait_for(pilot, lambda: isinstance(app.screen, EventsScreen))
        assert app.screen.session is not None and sum(isinstance(s, EventsScreen) for s in app.screen_stack) == 1


async def test_edit_recreates_ours_through_the_builder(probes, tracefs_root):
    prog = probes
    mine = f"{lifetime.run_name()}/negate"
    app = KprobeTui(locate(), BinaryCatalog(prog))
    async with app.run_test(size=(100, 30)) as pilot:
        panel = await open_panel(pilot)
        await select(pilot, panel, mine)
        await pilot.press("b")
        await wait_for(pilot, lambda: isinstance(app.screen, EditBuilder))  # its definition read in a worker
        builder = app.screen
        assert isinstance(builder, EditBuilder)
        assert (builder.function, builder.binary, builder.initial_kind) == ("negate", str(prog), "entry")
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert builder.query_one("#args").value == "x=%di:s32"
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: isinstance(app.screen, EventsScreen))
        lines = uprobes_on(tracefs_root, prog)
        assert not any(f"{mine} " in line for line in lines), lines  # the old one is gone
        assert [line.split()[0].split("/")[0] for line in lines if "negate" in line] == [f"p:{lifetime.run_name()}"]
