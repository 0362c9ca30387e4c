"""The source view: probeable lines numbered as perf probe -L, variables of the cursor's line."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from textual.app import App
from textual.widgets import Static

from kprobe_tui.debuginfo.describe import format_points
from kprobe_tui.debuginfo.lines import LineSpec, find_line_range
from kprobe_tui.debuginfo.scope import ProbeSpec, open_debuginfo
from kprobe_tui.errors import UserError
from kprobe_tui.tui.screens.source import DebugTarget, SourceScreen
from kprobe_tui.tui.widgets.source_view import SourceView

C_DIR = Path(__file__).parents[1] / "debuginfo" / "c"


@pytest.fixture
def program(tmp_path, monkeypatch) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    binary = tmp_path / "probed"
    subprocess.run(["gcc", "-O2", "-gdwarf-5", "-I", str(C_DIR), "-o", str(binary), str(C_DIR / "probed.c")],
                   check=True)
    return binary


class SourceApp(App):
    def __init__(self, screen: SourceScreen) -> None:
        super().__init__()
        self.source_screen = screen

    def on_mount(self) -> None:
        self.push_screen(self.source_screen)


async def settle(app: App, pilot) -> None:
    for _ in range(3):
        await app.workers.wait_for_complete()
        await pilot.pause()


def pane_text(screen: SourceScreen) -> str:
    return str(screen.query_one("#vars", Static).render())


async def test_probeable_lines_and_variables_of_the_cursor_line(program):
    expected = find_line_range(open_debuginfo(binary=str(program)), LineSpec.parse("count_ready"))
    screen = SourceScreen(DebugTarget(binary=str(program)), "count_ready")
    app = SourceApp(screen)
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(app, pilot)
        view = screen.query_one(SourceView)
        assert view.probeable == set(expected.lines) and view.number_base == expected.offset
        first = min(expected.lines)
        assert view.cursor == first
        row = view.render_line(first - 1 - int(view.scroll_offset.y)).text
        assert row.startswith(f"{first - expected.offset:7d}  ")  # perf -L's numbering

        def vars_for(line: int) -> str:
            spec = ProbeSpec("count_ready", line=line - expected.offset)
            info = open_debuginfo(binary=str(program))
            try:
                return format_points(spec, info.probe_points(spec), verbose=False).expandtabs(4)
            except UserError as error:  # e.g. a line sharing its address: the pane says so
                return str(error).expandtabs(4)

        assert pane_text(screen) == vars_for(first)
        await pilot.press("n")
        await settle(app, pilot)
        second = sorted(expected.lines)[1]
        assert view.cursor == second and pane_text(screen) == vars_for(second)
        gap = next(n for n in range(second, max(expected.lines)) if n not in expected.lines)
        while view.cursor < gap:
            await pilot.press("down")
        await settle(app, pilot)
        assert f"Line {gap} has no probe point of its own" in pane_text(screen)


async def test_missing_debug_info_is_a_plain_message(tmp_path):
    screen = SourceScreen(DebugTarget(binary=str(tmp_path / "nothing")), "main")
    app = SourceApp(screen)
    async with app.run_test(size=(100, 24)) as pilot:
        await settle(app, pilot)
        title = str(screen.query_one("#source-title", Static).render())
        assert "No source view for main" in title and "no such file" in title
