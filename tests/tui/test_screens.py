"""Every screen state of tests/tui/states.py at 80x24 and 160x50 (themes at 80x24), against its
approved SVG. Approve a change with ``--snapshot-update`` after looking at the picture."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.tui.states import shot_name, shots

HERE = Path(__file__).parent

SHOTS = [pytest.param(state, size, id=shot_name(state, size), marks=[pytest.mark.live] if state.kernel else [])
         for state, size in shots()]


@pytest.mark.parametrize(("state", "size"), SHOTS)
def test_screen(state, size, snap_compare):
    with state.environment():
        assert snap_compare(state.app(), terminal_size=size, run_before=state.reach)


def cell_colours(svg: str) -> set[str]:
    """The colours of the terminal cells: text classes and background rectangles (not the window's
    decoration: its title bar buttons are circles)."""
    text = re.findall(r"\.terminal-[\w-]+ \{[^}]*?fill: (#[0-9a-fA-F]{6})", svg)
    backgrounds = re.findall(r'<rect [^>]*?fill="(#[0-9a-fA-F]{6})"', svg)
    return {colour.lower() for colour in text + backgrounds}


async def test_monochrome_draws_only_the_terminals_two_colours():
    from tests.tui.states import kernel_app, to_functions

    for theme, expect_two in (("monochrome", True), ("dark", False)):
        app = kernel_app(theme)
        async with app.run_test(size=(80, 24)) as pilot:
            await to_functions(pilot)
            colours = cell_colours(app.export_screenshot())
        # Rich's SVG draws "no colour" as its default foreground and background
        assert (colours <= {"#c5c8c6", "#292929"}) is expect_two, (theme, colours)


def test_screenshots_are_the_approved_snapshots():
    """The README's gallery shows what the tests approved: after --snapshot-update, run
    python screenshots/generate.py (its output is the approved SVG, byte for byte)."""
    stale = []
    for state, size in shots():
        name = shot_name(state, size)
        approved = HERE / "__snapshots__" / "test_screens" / f"test_screen[{name}].svg"
        screenshot = HERE.parents[1] / "screenshots" / f"{name}.svg"
        if not screenshot.exists() or screenshot.read_bytes() != approved.read_bytes():
            stale.append(name)
    assert not stale, f"run python screenshots/generate.py {' '.join(stale)}"
