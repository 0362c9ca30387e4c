"""The debug assertion behind "no blocking call on the UI thread": while kprobe-tui runs, a DWARF
question, a compile or a tracefs write made on the thread that draws it raises, and the same call
in a worker does not. The suite turns the check on (tests/conftest.py), so every Pilot test of the
screens also proves they leave that work to workers; this file proves the check itself bites."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

from kprobe_tui import blocking
from kprobe_tui.debuginfo.scope import PointSpec, open_debuginfo
from kprobe_tui.kernel.sources import locate
from kprobe_tui.kernel.tracefs import Tracefs
from kprobe_tui.probes.binary import BinaryCatalog
from kprobe_tui.probes.compile import compile_spec
from kprobe_tui.probes.spec import parse_spec
from kprobe_tui.tui.app import KprobeTui

C_PROGRAM = Path(__file__).parent / "c" / "builder_prog.c"


@pytest.fixture(scope="module")
def prog(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("blocking") / "prog"
    subprocess.run(["gcc", "-O0", "-g", "-o", str(out), str(C_PROGRAM)], check=True)
    return out


async def test_dwarf_compile_and_tracefs_writes_are_refused_on_the_ui_thread_only(prog, tmp_path):
    assert blocking.checking  # as the suite runs
    info = open_debuginfo(binary=str(prog))
    spec = parse_spec(["work", "n"], binary=str(prog), group="kptui_blocking")
    snapshot = Tracefs(tmp_path)  # never written to: the check comes first
    app = KprobeTui(locate(), BinaryCatalog(str(prog)))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        # this test's coroutine runs on the app's thread, as a message handler would
        with pytest.raises(blocking.BlockedUiThread, match="reading the debug info of"):
            info.probe_points(PointSpec("work"))
        with pytest.raises(blocking.BlockedUiThread, match="compiling work"):
            compile_spec(spec, "kptui_blocking")
        with pytest.raises(blocking.BlockedUiThread, match="writing"):
            snapshot.write("kprobe_events", "p:kptui_blocking/x work")
        # in a worker thread the same calls run
        assert await asyncio.to_thread(info.probe_points, PointSpec("work"))
        [probe] = await asyncio.to_thread(compile_spec, spec, "kptui_blocking")
        assert probe.definition().startswith("p:kptui_blocking/work ")
    # the app is gone: its thread is no longer the UI's (the run's undo writes tracefs from it)
    assert info.probe_points(PointSpec("work"))
