"""Fixtures of the TUI tests that drive a real terminal."""

from __future__ import annotations

import shutil

import pytest

from tests.tmux_pane import Terminal


@pytest.fixture
def terminal(tmp_path):
    """An 80x24 tmux pane of the test's own (skipped where tmux is not installed)."""
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    pane = Terminal(tmp_path)
    yield pane
    pane.close()
