"""The source view: probeable lines numbered as perf probe -L, variables of the cursor's line."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from textual.app import App
from textual.message import Message
from textual.widgets import Static

from kprobe_tui.debuginfo.describe import format_points
from kprobe_tui.debuginfo.lines import LineSpec, find_line_range
from kprobe_tui.debuginfo.locate import find_vmlinux
from kprobe_tui.debuginfo.scope import PointSpec, open_debuginfo
from kprobe_tui.errors import UserError
from kprobe_tui.kernel.catalog import Catalog
from kprobe_tui.kernel.sources import locate
from kprobe_tui.probes.binary import BinaryCatalog
from kprobe_tui.tui.navigation import OpenBuilder
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
            spec = PointSpec("count_ready", line=line - expected.offset)
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


class Recorder(SourceApp):
    """The source screen alone, keeping the requests it posts up to the app."""

    def __init__(self, screen: SourceScreen) -> None:
        super().__init__(screen)
        self.requests: list[Message] = []

    def on_open_builder(self, message: OpenBuilder) -> None:
        self.requests.append(message)


def where_in(static: Static, word: str) -> tuple[int, int]:
    """(column, row) of ``word`` as a whole field of the rendered text."""
    for row, line in enumerate(str(static.render()).splitlines()):
        match = re.search(rf"(?<!\S){re.escape(word)}(?!\S)", line)
        if match:
            return match.start(), row
    raise AssertionError(f"{word!r} is not shown")


async def test_clicks_on_a_line_number_and_on_a_variable_ask_for_a_probe(program):
    expected = find_line_range(open_debuginfo(binary=str(program)), LineSpec.parse("count_ready"))
    screen = SourceScreen(DebugTarget(binary=str(program)), "count_ready")
    app = Recorder(screen)
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(app, pilot)
        view = screen.query_one(SourceView)
        line = next(n for n in sorted(expected.lines) if "global_counter++" in view.texts[n - 1])
        row = line - 1 - int(view.scroll_offset.y)
        await pilot.click(view, offset=(12, row))  # on the text: the cursor moves, nothing more
        await settle(app, pilot)
        assert view.cursor == line and app.requests == []
        await pilot.click(view, offset=(3, row))  # on the number: a probe there
        await pilot.click(view, offset=(20, row), times=2)  # a double click on the text: the same
        assert [(m.function, m.line, m.variable) for m in app.requests] == [("count_ready", line - expected.offset, None)] * 2
        app.requests.clear()
        plain = next(n for n in range(line, line + 99) if n not in expected.lines)
        await pilot.click(view, offset=(3, plain - 1 - int(view.scroll_offset.y)))
        assert app.requests == []  # a line without a probe point asks for nothing

        await pilot.click(view, offset=(12, row))
        await settle(app, pilot)
        assert "s" in screen.capturable  # the loop's pointer is live on that line
        column, vrow = where_in(screen.query_one("#vars", Static), "s")
        await pilot.click("#vars", offset=(column, vrow))
        assert [(m.line, m.variable) for m in app.requests] == [(line - expected.offset, "s")]
        await pilot.press("a")  # every capturable variable at once
        assert app.requests[-1].variable == " ".join(screen.capturable)


async def test_kernel_function_without_dwarf_falls_back_to_btf_with_entry_and_return():
    sources = locate()
    catalog = Catalog(sources)
    prototype = catalog.function("vfs_read").prototype
    assert prototype and prototype.startswith("ssize_t vfs_read(")
    try:
        find_vmlinux()
        pytest.skip("this machine has the kernel's DWARF: the fallback is not shown")
    except UserError as missing:
        reason = missing
    screen = SourceScreen(DebugTarget(), "vfs_read", prototype=lambda: catalog.function("vfs_read").prototype)
    app = Recorder(screen)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
        assert screen.fallback and not screen.query_one("#source-body").display
        assert str(screen.query_one("#prototype", Static).render()) == prototype
        missing = str(screen.query_one("#missing", Static).render())
        assert "Entry and return probes still work" in missing and "from BTF" in missing
        assert reason.hint.split(":")[0] in missing and "linux-image-" in missing  # which package brings the DWARF
        assert reason.message in str(screen.query_one("#source-title", Static).render())
        await pilot.press("enter")  # the Entry button has the focus
        await pilot.press("r")
        await pilot.click("#return")
        await pilot.click("#entry")
        assert [(m.function, m.kind) for m in app.requests] == [
            ("vfs_read", "entry"), ("vfs_read", "return"), ("vfs_read", "return"), ("vfs_read", "entry")]


@pytest.fixture
def plain_program(tmp_path) -> Path:
    """Built without -g: symbols, no DWARF."""
    source = tmp_path / "plain.c"
    source.write_text("int __attribute__((noinline)) twice(int x) { return 2 * x; }\n"
                      "int main(int argc, char **argv) { return twice(argc); }\n")
    binary = tmp_path / "plain"
    subprocess.run(["gcc", "-O1", "-o", str(binary), str(source)], check=True)
    return binary


async def test_binary_without_dwarf_says_registers_only(plain_program):
    binary = plain_program
    catalog = BinaryCatalog(binary)
    assert catalog.function("twice").prototype is None
    screen = SourceScreen(DebugTarget(binary=str(binary)), "twice", prototype=lambda: catalog.function("twice").prototype)
    app = Recorder(screen)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
        assert str(screen.query_one("#prototype", Static).render()) == "twice  (no debug info: registers only)"
        assert "no DWARF debug info" in str(screen.query_one("#source-title", Static).render())
        assert "%di" in str(screen.query_one("#missing", Static).render())
        await pilot.press("r")
        assert [(m.function, m.kind) for m in app.requests] == [("twice", "return")]


async def test_a_clone_shows_its_source_function_and_probes_the_clone(tmp_path):
    screen = SourceScreen(DebugTarget(binary=str(tmp_path / "gone")), "tcp_ack", symbol="tcp_ack.isra.0")
    app = Recorder(screen)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
        await pilot.press("enter")
        assert [(m.function, m.kind) for m in app.requests] == [("tcp_ack.isra.0", "entry")]


async def test_a_snapshots_kernel_function_advises_that_kernels_debug_info_not_this_machines():
    """Enter on a function of a Debian 6.12 snapshot: the advice names 6.12's package, never the running
    kernel's, and no debug file of this machine is looked for (it would be another kernel's source)."""
    from kprobe_tui.kernel.snapshot import open_snapshot
    from kprobe_tui.tui.app import KprobeTui
    from tests.tui.states import catalog_loaded, until

    sources = open_snapshot(Path(__file__).parents[1] / "fixtures" / "snapshots" / "debian-6.12.tar.gz")
    app = KprobeTui(sources)
    async with app.run_test(size=(80, 24)) as pilot:
        await catalog_loaded(pilot)
        await pilot.press("slash", *"vfs_read", "enter")
        await until(pilot, lambda: isinstance(app.screen, SourceScreen), "the source view opens")
        screen = app.screen
        await until(pilot, lambda: screen.fallback, "the BTF fallback is shown")
        said = str(screen.query_one("#source-title", Static).render()) + str(screen.query_one("#missing", Static).render())
        assert f"snapshot of kernel {sources.release}" in said and f"linux-image-{sources.release}-dbg" in said
        assert os.uname().release not in said


async def test_the_variables_of_a_static_function_of_two_files_are_its_files(tmp_path):
    """A row of the list names one file's copy (``twin@catalog_other.c``): the pane gives that copy's
    variables, as ``perf probe -V twin@catalog_other.c`` does (the name alone was 'not found')."""
    c_dir = Path(__file__).parent / "c"
    binary = tmp_path / "twins"
    subprocess.run(["gcc", "-O0", "-g", "-o", str(binary), str(c_dir / "catalog_main.c"), str(c_dir / "catalog_other.c")],
                   check=True)
    screen = SourceScreen(DebugTarget(binary=str(binary)), "twin@catalog_other.c")
    app = SourceApp(screen)
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(app, pilot)
        assert "not found" not in pane_text(screen)
        assert "Available variables at twin@catalog_other.c" in pane_text(screen) and "int x" in pane_text(screen)
