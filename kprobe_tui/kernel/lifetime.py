"""What this run puts in the kernel is taken out when the run ends, however it ends.

Probe groups and tracefs instances made for one run carry the run's PID in their name
(``kptui_<pid>``). Each is registered here with the action that removes it; the actions run
(newest first) on normal exit, on an unhandled exception, and on SIGTERM, SIGHUP (the SSH
connection dropped) and SIGINT. After SIGKILL nothing can run, so the next start finds names
whose PID is dead (``is_stale``) and offers to remove them.
"""

from __future__ import annotations

import atexit
import os
import re
import signal
import sys
import threading
from typing import Callable

import psutil

RUN_PREFIX = "kptui_"
_RUN_NAME = re.compile(rf"^{RUN_PREFIX}(\d+)$")


def run_name(pid: int | None = None) -> str:
    """The name of this run's probe group and tracefs instance."""
    return f"{RUN_PREFIX}{pid if pid is not None else os.getpid()}"


def owner_pid(name: str) -> int | None:
    """The PID a run-scoped name belongs to, or None for names that are not ours."""
    match = _RUN_NAME.match(name)
    return int(match.group(1)) if match else None


def is_stale(name: str) -> bool:
    """A run-scoped name whose process is gone (killed with SIGKILL, or crashed hard)."""
    pid = owner_pid(name)
    return pid is not None and pid != os.getpid() and not psutil.pid_exists(pid)


class _Undo:
    """A stack of removal actions; each runs once, failures are reported and do not stop the rest."""

    def __init__(self) -> None:
        # Re-entrant: the signal handler runs on the main thread, possibly while it is inside push().
        self._lock = threading.RLock()
        self._actions: dict[int, tuple[str, Callable[[], None]]] = {}
        self._next = 0
        self._installed = False

    def push(self, description: str, action: Callable[[], None]) -> int:
        with self._lock:
            self._install()
            self._next += 1
            self._actions[self._next] = (description, action)
            return self._next

    def discard(self, token: int) -> None:
        """Forget an action because its object was removed (or pinned) by other means."""
        with self._lock:
            self._actions.pop(token, None)

    def run(self, token: int) -> None:
        """Run one action now (the object is being removed on purpose)."""
        with self._lock:
            entry = self._actions.pop(token, None)
        if entry:
            entry[1]()

    def run_all(self) -> list[str]:
        """Undo everything, newest first; the descriptions of what failed, with the reason."""
        failures = []
        while True:
            with self._lock:
                if not self._actions:
                    break
                token = max(self._actions)
                description, action = self._actions.pop(token)
            try:
                action()
            except Exception as exc:  # a failed removal must not stop the others
                failures.append(f"{description}: {exc}")
        for failure in failures:
            print(f"kprobe-tui: could not remove {failure}", file=sys.stderr)
        return failures

    def _install(self) -> None:
        if self._installed:
            return
        self._installed = True
        atexit.register(self.run_all)
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGHUP):
                signal.signal(signum, self._on_signal)

    def _on_signal(self, signum, _frame) -> None:
        self.run_all()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


undo = _Undo()
