"""The TUI in a real terminal (tmux): SIGTERM and SIGHUP give the terminal back and leave nothing in
$TMPDIR; a crash is never exit status 0.

Each test runs its own tmux server (a socket in its tmp_path), so nothing else's sessions are touched.
"""

from __future__ import annotations

import re
import signal
import subprocess
from pathlib import Path

import pytest

from tests.tmux_pane import start_kprobe_tui

SNAPSHOT_61 = Path(__file__).parents[1] / "fixtures" / "snapshots" / "debian-6.1.tar.gz"
RESTORED = "0 1 0 0 0 0"  # main screen, cursor shown, no mouse reporting of any kind


def snapshot_copies(tmp_path: Path) -> list[str]:
    return [p.name for p in tmp_path.iterdir() if p.name.startswith("kprobe-tui-snapshot-")]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_restores_the_terminal_and_removes_the_snapshot_copy(terminal, tmp_path, signum):
    pid = start_kprobe_tui(terminal, tmp_path, "--snapshot", str(SNAPSHOT_61))
    assert terminal.flags() != RESTORED  # the TUI's modes are on: alternate screen, mouse reporting
    assert len(snapshot_copies(tmp_path)) == 1
    subprocess.run(["kill", f"-{signum.name.removeprefix('SIG')}", str(pid)], check=True)
    terminal.wait(lambda: f"EXIT={128 + signum}" in terminal.screen(), "it ends by the signal")
    assert terminal.flags() == RESTORED
    assert snapshot_copies(tmp_path) == []
    # the line discipline is back too: canonical mode and echo, as the shell had them
    terminal.type("stty -a | tr ' ' '\\n' | grep -x -e icanon -e -icanon -e echo -e -echo | tr '\\n' ' '; echo")
    terminal.wait(lambda: "icanon echo" in terminal.screen(), "stty shows icanon and echo")


def test_a_crash_is_never_exit_status_zero(terminal, tmp_path):
    """An exception Textual catches (it prints the traceback and restores the terminal) used to end in 0."""
    hook = tmp_path / "crash"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "from kprobe_tui.tui.screens import functions\n"
        "def crash(self):\n    raise RuntimeError('injected by the test')\n"
        "functions.FunctionsScreen.show_catalog = crash\n")
    start_kprobe_tui(terminal, tmp_path, "-x", "/usr/bin/true", env=f"PYTHONPATH={hook}")
    terminal.wait(lambda: re.search(r"^EXIT=\d+", terminal.screen(), re.M), "it ends")
    assert re.search(r"^EXIT=70$", terminal.screen(), re.M) and terminal.flags() == RESTORED
