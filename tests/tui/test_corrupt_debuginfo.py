"""The TUI on a program whose DWARF is corrupt: the source view and the builder say so, naming the file;
nothing crashes."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest

from kprobe_tui.debuginfo.corrupt import CorruptDebugInfo
from kprobe_tui.debuginfo.lines import LineSpec, find_line_range
from kprobe_tui.debuginfo.locate import ElfSections
from kprobe_tui.debuginfo.scope import open_debuginfo
from kprobe_tui.kernel import lifetime
from kprobe_tui.kernel.sources import locate
from kprobe_tui.probes.binary import BinaryCatalog
from kprobe_tui.tui.app import KprobeTui
from kprobe_tui.tui.screens.builder import ProbeBuilderScreen
from kprobe_tui.tui.screens.source import SourceScreen
from kprobe_tui.tui.widgets.function_list import FunctionList

PROBED = Path(__file__).parents[1] / "debuginfo" / "c" / "probed.c"


@pytest.fixture
def corrupt(tmp_path, monkeypatch) -> Path:
    """A copy of probed (-O0) whose .debug_info is damaged where count_ready's unit is read."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    good = tmp_path / "good"
    subprocess.run(["gcc", "-O0", "-g", "-I", str(PROBED.parent), "-o", str(good), str(PROBED)], check=True)
    data = good.read_bytes()
    info = ElfSections(good).sections[".debug_info"]
    rng = random.Random(15)
    for attempt in range(200):
        copy = bytearray(data)
        for _ in range(8):
            copy[info.offset + 11 + rng.randrange(info.size - 11)] = rng.randrange(256)
        path = tmp_path / f"corrupt{attempt}"
        path.write_bytes(copy)
        try:
            catalog = BinaryCatalog(path)
            if "count_ready" not in catalog.names:
                continue
            find_line_range(open_debuginfo(binary=str(path)), LineSpec.parse("count_ready"))
        except CorruptDebugInfo:
            return path
        except Exception:
            continue
    pytest.fail("no copy damaged the right place")


async def test_source_view_and_builder_say_the_debug_info_is_corrupt(corrupt):
    app = KprobeTui(locate(mount=False), BinaryCatalog(corrupt))
    try:
        async with app.run_test(size=(120, 36)) as pilot:
            functions = app.screen.query_one(FunctionList)
            for _ in range(200):
                if functions.rows:
                    break
                await pilot.pause(0.05)
            functions.move_cursor(functions.rows.index("count_ready"))
            await pilot.press("enter")
            source = app.screen
            assert isinstance(source, SourceScreen)
            for _ in range(200):
                if source.fallback:
                    break
                await pilot.pause(0.05)
            title = str(source.query_one("#source-title").render())
            assert f"debug info of {corrupt} is corrupt" in title.replace("\n", "")
            await pilot.press("enter")  # the fallback's entry probe: the builder
            builder = app.screen
            assert isinstance(builder, ProbeBuilderScreen)
            await pilot.press(*"count")
            for _ in range(200):
                if builder.preview is not None and builder.preview.error is not None:
                    break
                await pilot.pause(0.05)
            assert "is corrupt" in builder.preview.error.message and str(corrupt) in builder.preview.error.message
            assert app.is_running
    finally:
        lifetime.undo.run_all()
