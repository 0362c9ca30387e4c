"""Shared test set-up: markers that skip with a reason when this machine cannot run a test."""

from __future__ import annotations

import os
import pwd
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from kprobe_tui import blocking
from kprobe_tui.kernel.sources import locate

# A DWARF question, a compile or a tracefs write made on the TUI's UI thread fails the test that made
# it (kprobe_tui/blocking.py): every Pilot test also proves the screens leave that work to workers.
blocking.checking = True

FIXTURES = Path(__file__).parent / "fixtures"

# Started in the background of a script (`cmd &`), the suite inherits SIGINT ignored, and so would every child the
# tests send a Ctrl-C to (count, latency, a download): they never stopped. A handled SIGINT is reset at exec.
signal.signal(signal.SIGINT, signal.default_int_handler)

# The app's colours and pictures are its own, not the terminal settings of whoever runs the suite: Textual
# reads these when an app starts (NO_COLOR makes every snapshot monochrome). Tests of them set them themselves.
for variable in ("NO_COLOR", "TEXTUAL_COLOR_SYSTEM", "TEXTUAL_FILTERS", "TEXTUAL_ANIMATIONS", "COLUMNS", "LINES"):
    os.environ.pop(variable, None)


@contextmanager
def system_user(name: str) -> Iterator[tuple[int, int]]:
    """A throw-away system user (no home, no shell) for the duration; its (uid, gid)."""
    subprocess.run(["userdel", name], check=False, capture_output=True)  # left by a killed run
    subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True)
    try:
        entry = pwd.getpwnam(name)
        yield entry.pw_uid, entry.pw_gid
    finally:
        subprocess.run(["userdel", name], check=True)


def _live_tracefs() -> Path | None:
    if os.geteuid() != 0:
        return None
    sources = locate()
    return sources.tracefs


def pytest_collection_modifyitems(config, items):
    tracefs = None
    checked = False
    for item in items:
        needs_live = item.get_closest_marker("live") is not None
        needs_kernel = item.get_closest_marker("kernel") is not None
        if not (needs_live or needs_kernel):
            continue
        if not checked:
            tracefs, checked = _live_tracefs(), True
        if tracefs is None:
            item.add_marker(pytest.mark.skip(reason="needs root and a mounted tracefs"))
        elif needs_live and not (tracefs / "uprobe_events").exists():
            item.add_marker(pytest.mark.skip(reason="this kernel has no uprobe_events (CONFIG_UPROBE_EVENTS)"))
        elif needs_kernel and not (tracefs / "kprobe_events").exists():
            item.add_marker(
                pytest.mark.skip(
                    reason="this kernel has no kprobes; tests/kernel/test_guests.py runs these inside QEMU guests"
                )
            )


@pytest.fixture
def tracefs_root() -> Path:
    """The live tracefs root (tests using it are marked live or kernel, so it exists)."""
    root = _live_tracefs()
    assert root is not None
    return root


@pytest.fixture(autouse=True)
def no_ui_thread_after_the_test():
    """An app that ended without its unmount must not leave its thread marked for the next test."""
    yield
    blocking.ui_thread(None)
