"""Work that blocks (a DWARF question, compiling a probe, a tracefs write) never runs on the UI thread.

The TUI names the thread that draws it while it runs (``ui_thread``); the cores call
``blocking(what)`` where they block. With ``checking`` on, as the test suite turns it on, a blocking
call made on the UI thread raises ``BlockedUiThread`` naming it, so every Pilot test also proves
that the screens leave that work to workers. Off (the default), the check is one comparison.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

checking = False
_ui_thread: int | None = None
# Set by a caller that blocks knowingly on that thread: a Pilot test computing what a screen should
# show runs on the app's thread (in its own asyncio task, so the screens' tasks are still checked).
_knowingly: ContextVar[bool] = ContextVar("knowingly", default=False)


class BlockedUiThread(AssertionError):
    """A blocking call ran on the thread that draws the UI: a screen should have used a worker."""


def ui_thread(ident: int | None) -> None:
    """The thread that must stay responsive (the TUI's event loop), or None once it has stopped."""
    global _ui_thread
    _ui_thread = ident


def blocking(what: str) -> None:
    """Say that ``what`` blocks here: refused on the UI thread when checking."""
    if checking and _ui_thread is not None and threading.get_ident() == _ui_thread and not _knowingly.get():
        raise BlockedUiThread(f"{what} ran on the UI thread: run it in a worker (kprobe_tui/tui/work.py)")


@contextmanager
def knowingly() -> Iterator[None]:
    """Blocking calls in this block (this asyncio task only) are not refused: a test's own oracle."""
    token = _knowingly.set(True)
    try:
        yield
    finally:
        _knowingly.reset(token)
