"""No keystroke lost or misrouted: keys that come in one burst go where the user meant them.

A fast typist, or an SSH connection delivering ``/helper⏎`` in one packet, sends the keys before
the focus change the first one asks for has happened. Before keys.py the letters went to the
function list: ``p`` opened the builder on the wrong function, ``e`` the events screen, and the
Enter only left the filter. Two ways of sending a burst: ``pilot.press`` with no pause (each key
posted once the app is idle), and ``packet`` (every key posted at once, as the terminal driver's
input thread posts a packet's keys), which is the harder of the two.
"""

from __future__ import annotations

import subprocess
import unicodedata
from pathlib import Path

import pytest
from textual import events
from textual.keys import REPLACED_KEYS, _character_to_key, _get_unicode_name_from_key
from textual.widgets import Input

from kprobe_tui.kernel.sources import locate
from kprobe_tui.probes.binary import BinaryCatalog
from kprobe_tui.tui.app import KprobeTui
from kprobe_tui.tui.screens.builder import ProbeBuilderScreen
from kprobe_tui.tui.screens.functions import FunctionsScreen
from kprobe_tui.tui.screens.source import SourceScreen
from kprobe_tui.tui.widgets.function_list import FunctionList

C_PROGRAM = Path(__file__).parent / "c" / "builder_prog.c"


async def _pilot_burst(pilot, keys: list[str]) -> None:
    await pilot.press(*keys)


async def _packet(pilot, keys: list[str]) -> None:
    """Every key posted before any is handled, as the driver's input thread posts one read's keys."""
    app = pilot.app
    for key in keys:  # the key and its character as Pilot makes them
        name = _character_to_key(key) if len(key) == 1 and not key.isalnum() else key
        try:
            char = unicodedata.lookup(_get_unicode_name_from_key(REPLACED_KEYS.get(name, name)))
        except KeyError:
            char = name if len(name) == 1 else None
        app._driver.send_message(events.Key(name, char))
    await pilot.pause()


BURSTS = pytest.mark.parametrize("burst", [_pilot_burst, _packet], ids=["pilot.press", "packet"])


async def _loaded(pilot) -> FunctionList:
    functions = pilot.app.screen.query_one(FunctionList)
    await _until(pilot, lambda: functions.rows, "the function list loads")
    return functions


async def _until(pilot, condition, what: str) -> None:
    for _ in range(400):  # 20 s: the kernel's catalog loads slowly while other tests share the cores
        if condition():
            return
        await pilot.pause(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def prog(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("keys") / "prog"
    subprocess.run(["gcc", "-O0", "-g", "-o", str(out), str(C_PROGRAM)], check=True)
    return out


@BURSTS
async def test_slash_name_enter_in_one_burst_opens_that_kernel_function(burst):
    app = KprobeTui(locate())
    async with app.run_test(size=(80, 24)) as pilot:
        await _loaded(pilot)
        name = "tcp_v4_rcv"  # p (probe), e? no; c, r, v: none may act on the list while it is typed
        expected = next(row for row in app.catalog.names if name in row)
        await burst(pilot, ["slash", *name, "enter"])
        await _until(pilot, lambda: isinstance(app.screen, SourceScreen), "the source view opens")
        assert app.screen.symbol == expected
        assert len(app.screen_stack) == 3  # nothing else opened on the way
        functions_screen = app.screen_stack[1]
        assert isinstance(functions_screen, FunctionsScreen)
        assert functions_screen.query_one("#filter", Input).value == name


@BURSTS
async def test_slash_name_enter_in_one_burst_opens_that_function_of_a_binary(prog, burst):
    """``helper``: h, e (events), l (probes panel), p (builder): every letter is an action on the list."""
    app = KprobeTui(locate(), BinaryCatalog(str(prog)))
    async with app.run_test(size=(80, 24)) as pilot:
        await _loaded(pilot)
        await burst(pilot, ["slash", *"helper", "enter"])
        await _until(pilot, lambda: isinstance(app.screen, SourceScreen), "the source view opens")
        assert app.screen.symbol == "helper"
        assert len(app.screen_stack) == 3
        assert app.screen_stack[1].query_one("#filter", Input).value == "helper"


@BURSTS
async def test_keys_typed_right_after_p_land_in_the_builders_args(prog, burst):
    """``/work``, escape, ``p`` and the arguments at once: the text is the builder's, not the list's."""
    app = KprobeTui(locate(), BinaryCatalog(str(prog)))
    async with app.run_test(size=(80, 24)) as pilot:
        await _loaded(pilot)
        await burst(pilot, ["slash", *"work", "escape", "p", *"rec->id n"])
        await _until(pilot, lambda: isinstance(app.screen, ProbeBuilderScreen), "the builder opens")
        builder = app.screen
        await _until(pilot, lambda: builder.query_one("#args").value == "rec->id n", "the arguments are typed")
        assert builder.function == "work" and len(app.screen_stack) == 3


@BURSTS
async def test_a_letter_typed_in_the_filter_is_text_never_an_action(prog, burst):
    """Every single-letter action of the function list and the app typed into the filter: all text."""
    app = KprobeTui(locate(), BinaryCatalog(str(prog)))
    async with app.run_test(size=(80, 24)) as pilot:
        await _loaded(pilot)
        letters = "pqnlewx"
        await burst(pilot, ["slash", *letters])
        box = app.screen.query_one("#filter", Input)
        await _until(pilot, lambda: box.value == letters, "every letter is typed")  # a packet's keys take a few turns
        assert isinstance(app.screen, FunctionsScreen) and len(app.screen_stack) == 2


@pytest.mark.live
async def test_back_from_the_source_a_letter_is_the_lists_action_not_filter_text(prog):
    """``/work``, Enter (the source), Escape (back): the list has the focus, so ``c`` counts; the filter keeps
    ``work`` and never becomes ``workc``."""
    app = KprobeTui(locate(), BinaryCatalog(str(prog)))
    async with app.run_test(size=(80, 24)) as pilot:
        functions = await _loaded(pilot)
        await pilot.press("slash", *"work", "enter")
        await _until(pilot, lambda: isinstance(app.screen, SourceScreen), "the source view opens")
        await pilot.press("escape")
        await _until(pilot, lambda: isinstance(app.screen, FunctionsScreen), "back on the functions")
        assert functions.has_focus
        await pilot.press("c")
        await _until(pilot, lambda: not isinstance(app.screen, FunctionsScreen), "c opens the count")
        assert app.screen_stack[1].query_one("#filter", Input).value == "work"


async def test_arrows_in_the_filter_move_the_highlight_that_enter_opens(prog):
    app = KprobeTui(locate(), BinaryCatalog(str(prog)))
    async with app.run_test(size=(80, 24)) as pilot:
        functions = await _loaded(pilot)
        await pilot.press("slash", *"e", "down")  # helper, main, ...: the second one
        assert app.screen.query_one("#filter", Input).has_focus and functions.cursor == 1
        second = functions.current
        await pilot.press("enter")
        await _until(pilot, lambda: isinstance(app.screen, SourceScreen), "the source view opens")
        assert app.screen.symbol == second
