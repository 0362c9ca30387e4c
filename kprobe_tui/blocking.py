"""Work that blocks (a DWARF question, compiling a probe, a tracefs write) never runs on the UI thread.

The TUI names the thread that draws it while it runs (``ui_thread``); the cores call
``blocking(what)`` where they block. With ``checking`` on, as the test suite turns it on, a blocking
call made on the UI thread raises ``BlockedUiThread`` naming it, so every Pilot test also proves
that the screens leave that work to workers. Off (the default), the check is one comparison.
"""

from __future__ import annotations

import threading

checking = False
_ui_thread: int | None = None


class BlockedUiThread(AssertionError):
    """A blocking call ran on the thread that draws the UI: a screen should have used a worker."""


def ui_thread(ident: int | None) -> None:
    """The thread that must stay responsive (the TUI's event loop), or None once it has stopped."""
    global _ui_thread
    _ui_thread = ident


def blocking(what: str) -> None:
    """Say that ``what`` blocks here: refused on the UI thread when checking."""
    if checking and _ui_thread is not None and threading.get_ident() == _ui_thread:
        raise BlockedUiThread(f"{what} ran on the UI thread: run it in a worker (kprobe_tui/tui/work.py)")
