"""Untrusted text in the TUI is shown as literal characters: never parsed as markup (no MarkupError, no
``[@click=...]`` action), never sent to the terminal as a control sequence.

What reaches the terminal is checked on what Textual would write for the whole screen: Pilot runs
headless and writes nothing, so the compositor's full update is rendered to raw terminal data here.
"""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import tarfile
from pathlib import Path

import pytest

from kprobe_tui.kernel import lifetime
from kprobe_tui.kernel.snapshot import open_snapshot
from kprobe_tui.kernel.sources import locate
from kprobe_tui.kernel.tracefs import Tracefs
from kprobe_tui.probes.binary import BinaryCatalog
from kprobe_tui.probes.symbols import ElfSymbols
from kprobe_tui.tui.app import KprobeTui
from kprobe_tui.tui.navigation import ShowEvents
from kprobe_tui.tui.screens.builder import ProbeBuilderScreen
from kprobe_tui.tui.screens.events import EventsScreen
from kprobe_tui.tui.screens.source import SourceScreen
from kprobe_tui.tui.widgets.event_table import EventTable
from kprobe_tui.tui.widgets.function_list import FunctionList
from kprobe_tui.tui.widgets.source_view import SourceView
from tests.live.hostile import ESCAPES, FORBIDDEN, MARKUP, RENAMED, build_hostile
from tests.tui.states import until

SNAPSHOT_61 = Path(__file__).parents[1] / "fixtures" / "snapshots" / "debian-6.1.tar.gz"
GROUP = "kpthostiletui"


def on_terminal(app) -> str:
    """All Textual would write to draw the current screen (toasts included), as raw terminal data."""
    return app.screen._compositor.render_update(full=True).render_segments(app.console)


def assert_terminal_safe(app) -> str:
    written = on_terminal(app)
    leaked = [seq for seq in FORBIDDEN if seq in written]
    assert not leaked, f"{leaked} would reach the terminal"
    return written


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> Path:
    return build_hostile(tmp_path_factory.mktemp("hostile"))


async def test_the_browser_shows_hostile_symbol_names_as_text(hostile):
    """Symbol names with ESC, ``[/]close`` (a MarkupError in the source title) and a markup link."""
    app = KprobeTui(locate(mount=False), BinaryCatalog(hostile))
    try:
        async with app.run_test(size=(120, 36)) as pilot:
            functions = app.screen.query_one(FunctionList)
            await until(pilot, lambda: functions.rows, "the function list is filled")
            for name in RENAMED.values():
                functions.move_cursor(functions.rows.index(name))
                await pilot.pause()
                written = assert_terminal_safe(app)
                assert name.replace(ESCAPES, "\\x1b]0;title\\x07\\x1b[2J") in written  # shown, escaped
            # [/]close: the source view (no DWARF under that name: the function DWARF has at its address,
            # as perf finds an alias) and back
            functions.move_cursor(functions.rows.index("[/]close"))
            await pilot.press("enter")
            assert isinstance(app.screen, SourceScreen)
            title = app.screen.query_one("#source-title")
            await until(pilot, lambda: "probeable lines" in str(title.render()), "the source is shown")
            assert str(title.render()).startswith("[/]close  ")
            assert_terminal_safe(app)
            await pilot.press("escape")
            # a markup link: the builder shows the name as it is; a click on it opens nothing
            link = RENAMED["renamed_click"]
            functions.move_cursor(functions.rows.index(link))
            await pilot.press("p")
            builder = app.screen
            assert isinstance(builder, ProbeBuilderScreen)
            await until(pilot, lambda: builder.preview is not None, "the preview is compiled")
            target = builder.query_one("#target")
            assert link in str(target.render())
            await pilot.click(target, offset=(len("uprobe  ") + len(str(hostile)) + 4, 0))
            await pilot.pause()
            assert app.is_running and app.screen is builder
            assert_terminal_safe(app)
    finally:
        lifetime.undo.run_all()


async def test_the_source_view_shows_escapes_in_the_file_as_text(hostile):
    app = KprobeTui(locate(mount=False), BinaryCatalog(hostile))
    try:
        async with app.run_test(size=(120, 36)) as pilot:
            functions = app.screen.query_one(FunctionList)
            await until(pilot, lambda: functions.rows, "the function list is filled")
            functions.move_cursor(functions.rows.index("shout"))
            await pilot.press("enter")
            view = app.screen.query_one(SourceView)
            await until(pilot, lambda: view.probeable, "the source is shown")
            view.scroll_to(y=0, animate=False, immediate=True)
            await pilot.pause()
            written = assert_terminal_safe(app)
            assert "\\x1b]0;title\\x07\\x1b[2J [/]close [@click=app.quit]" in written
            marker = next(n for n, text in enumerate(view.texts, 1) if "/* HOSTILE LINE */" in text)
            assert marker in view.probeable  # the form feed and U+2028 in the comment above shifted nothing
    finally:
        lifetime.undo.run_all()


@pytest.mark.live
async def test_the_events_screen_shows_captured_escapes_and_markup_as_text(hostile, tracefs_root):
    top = Tracefs(tracefs_root)
    offset = ElfSymbols(hostile).function("shout").file_offset
    top.write("uprobe_events", f"p:{GROUP}/shout {hostile}:0x{offset:x} s=+0(%di):string n=%si:s32\n")
    app = KprobeTui(locate(mount=False), BinaryCatalog(hostile))
    try:
        async with app.run_test(size=(120, 36)) as pilot:
            app.post_message(ShowEvents([f"{GROUP}/shout"]))
            await until(pilot, lambda: isinstance(app.screen, EventsScreen), "the events screen")
            events = app.screen
            await until(pilot, lambda: events.session is not None and events.session.reader is not None, "recording")
            await asyncio.to_thread(subprocess.run, [str(hostile)], check=True, capture_output=True)
            await until(pilot, lambda: len(events.store) == 3, "three events")
            table = events.query_one(EventTable)
            for row in range(3):
                table.move_cursor(row)
                await pilot.press("enter")  # the detail pane: every field of the event
                await pilot.pause()
                written = assert_terminal_safe(app)
                await pilot.press("enter")
            assert "\\x1b]0;title\\x07\\x1b[2J" in written or "\\x1b]0;title" in on_terminal(app)
            table.move_cursor(1)
            await pilot.press("enter")
            await pilot.pause()
            detail = str(events.query_one("#detail-text").render())
            assert MARKUP in detail  # the markup, literally: no MarkupError, no link, no action
            assert app.is_running
    finally:
        lifetime.undo.run_all()
        top.write("uprobe_events", f"-:{GROUP}/shout\n")


def hostile_snapshot(path: Path) -> Path:
    """The real 6.1 snapshot with a manifest and kallsyms that hold markup and escape sequences."""
    with tarfile.open(SNAPSHOT_61) as source, tarfile.open(path, "w:gz") as out:
        for member in source:
            data = source.extractfile(member).read()
            if member.name == "manifest.json":
                manifest = json.loads(data)
                manifest["release"] = RELEASE
                manifest["missing"] = ["btf/[@click=app.quit]x: [/]gone", f"{ESCAPES}: reasons"]
                data = json.dumps(manifest).encode()
            if member.name == "proc/kallsyms":
                data += "".join(f"ffffffffc1000{n}00 t {name}\n" for n, name in enumerate(KERNEL_NAMES)).encode()
            info = tarfile.TarInfo(member.name)
            info.size = len(data)
            out.addfile(info, io.BytesIO(data))
    return path


RELEASE = f"6.1 [@click=app.quit]quit[/] [link=https://example.com]x[/link] {ESCAPES}"
KERNEL_NAMES = ["[@click=app.quit]click", "[/]close", f"esc{ESCAPES}"]  # kallsyms takes any non-space name


async def test_a_hostile_snapshot_is_shown_as_text(tmp_path):
    """Its release in the title and in lab mode's notification, its symbol names in the browser and the
    source view's title: markup shown as written (not a link, not an action, no MarkupError)."""
    app = KprobeTui(open_snapshot(hostile_snapshot(tmp_path / "hostile.tar.gz")))
    try:
        async with app.run_test(size=(120, 36), notifications=True) as pilot:
            functions = app.screen.query_one(FunctionList)
            await until(pilot, lambda: functions.rows, "the function list is filled")
            assert RELEASE.replace(ESCAPES, "\\x1b]0;title\\x07\\x1b[2J") in app.sub_title
            await until(pilot, lambda: app.screen.query("Toast"), "lab mode's notification is shown")
            [toast] = app.screen.query("Toast")
            shown = toast.render()
            assert "[@click=app.quit]quit[/] [link=https://example.com]x[/link]" in str(shown).replace("\n", "")
            assert not [span for span in shown.spans if "@click" in str(span.style) or "link" in str(span.style)]
            assert_terminal_safe(app)
            for name in KERNEL_NAMES:
                functions.move_cursor(functions.rows.index(name))
                await pilot.pause()
                assert_terminal_safe(app)
            functions.move_cursor(functions.rows.index("[/]close"))
            await pilot.press("enter")
            assert isinstance(app.screen, SourceScreen)
            await pilot.pause()
            assert "[/]close" in str(app.screen.query_one("#source-title").render())
            assert_terminal_safe(app)
            assert app.is_running
    finally:
        lifetime.undo.run_all()
