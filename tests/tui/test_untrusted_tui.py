"""The TUI's way into tracefs, the builder, with the issue 15 inputs: a ``-x`` path that holds a
newline, a run-scoped group typed in the Group box, a raw fetch-arg carrying a second command.
Nothing is created and the administrator's ``mygroup/x`` survives (live: real uprobes)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from kprobe_tui.kernel import lifetime
from kprobe_tui.kernel.tracefs import Tracefs
from kprobe_tui.probes.symbols import ElfSymbols
from tests.tui.test_builder import app_for, open_builder, settled

pytestmark = pytest.mark.live

C_PROGRAM = Path(__file__).parent / "c" / "builder_prog.c"


@pytest.fixture
def hostile_prog(tmp_path) -> Path:
    """The builder's program, in a directory named to end the definition line and delete ``mygroup/x``."""
    directory = tmp_path / "a:0x1184\n-:mygroup/x\n#"
    directory.mkdir(parents=True)
    subprocess.run(["gcc", "-O0", "-g", "-o", str(directory / "prog"), str(C_PROGRAM)], check=True)
    return directory / "prog"


@pytest.fixture
def victim(hostile_prog, tracefs_root, tmp_path):
    """The administrator's ``mygroup/x``, on a hard link of the program with a plain path."""
    top = Tracefs(tracefs_root)
    plain = tmp_path / "victim-prog"
    os.link(hostile_prog, plain)
    top.write("uprobe_events", f"p:mygroup/x {plain}:0x{ElfSymbols(plain).function('helper').file_offset:x}\n")
    try:
        yield top
    finally:
        if "mygroup/x " in top.read("uprobe_events"):
            top.write("uprobe_events", "-:mygroup/x\n")


def ours(top: Tracefs, tmp_path: Path) -> list[str]:
    return [line for line in top.read("uprobe_events").splitlines()
            if "mygroup/" in line or str(tmp_path) in line or lifetime.run_name() in line]


async def test_a_path_holding_a_newline_is_refused_by_the_builder(hostile_prog, victim, tmp_path):
    before = ours(victim, tmp_path)
    app = app_for(hostile_prog)
    async with app.run_test(size=(100, 30)) as pilot:
        builder = await open_builder(pilot, "work")
        assert builder.preview.error is not None
        assert "tracefs cannot name this file" in builder.preview.error.message
        assert "a newline (U+000A)" in builder.preview.error.message and "hard-link" in builder.preview.error.hint
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert str(builder.query_one("#status").render()).startswith("not created:")
    assert ours(victim, tmp_path) == before


async def test_the_group_box_and_the_args_box_cannot_make_a_second_command(hostile_prog, victim, tmp_path):
    prog = tmp_path / "prog"
    os.link(hostile_prog, prog)
    before = ours(victim, tmp_path)
    app = app_for(prog)
    async with app.run_test(size=(100, 30)) as pilot:
        builder = await open_builder(pilot, "work")
        builder.query_one("#group").value = "kptui_99999"
        await settled(pilot)
        assert "run-scoped" in builder.preview.error.message
        await pilot.press("ctrl+s")
        await pilot.pause()
        builder.query_one("#group").value = lifetime.run_name()
        builder.query_one("#args").value = "+0(%sp)\n-:mygroup/x\n#:u8"  # as a paste could put it there
        await settled(pilot)
        assert "a newline (U+000A) in the Args" in builder.preview.error.message
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert str(builder.query_one("#status").render()).startswith("not created:")
    assert ours(victim, tmp_path) == before
