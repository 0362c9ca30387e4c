"""Helpers for the in-guest tests: run the CLI as a user does, make the kernel do something observable."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from harness import PROJECT


def run_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m kprobe_tui ARGS`` as a user runs it (text out, status back)."""
    return subprocess.run(
        [sys.executable, "-m", "kprobe_tui", *args], cwd=PROJECT, capture_output=True, text=True, timeout=timeout
    )


def trigger_open(path: Path, must_exist: bool = True) -> None:
    """Make the kernel open ``path`` from a process of its own (comm ``cat``)."""
    result = subprocess.run(["cat", str(path)], capture_output=True)
    assert (result.returncode == 0) == must_exist, result.stderr


class Tail:
    """``kprobe-tui tail --json`` in the background, as a user runs it; events read on a thread.

    ``ready()`` waits until its instance records the events; ``stop(signum)`` ends it the way a
    terminal or ssh does (SIGTERM, SIGHUP) and returns its exit status.
    """

    def __init__(self, tracefs_root: Path, events: list[str], *options: str) -> None:
        self.targets = events
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kprobe_tui", "tail", "--json", *options, *events],
            cwd=PROJECT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        self.instance = tracefs_root / "instances" / f"kptui_{self.proc.pid}"
        self.events: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.events.put(json.loads(line))

    def ready(self, limit: float = 120) -> None:
        """Block until every tailed event is enabled in our instance (Python starts slowly in a guest)."""
        deadline = time.monotonic() + limit
        enables = [self.instance / "events" / name.replace(":", "/") / "enable" for name in self.targets]
        while not all(_reads(path) == "1" for path in enables):
            if self.proc.poll() is not None:
                raise AssertionError(f"tail exited {self.proc.returncode}: {self.proc.stderr.read()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"tail did not enable {self.targets} in {self.instance}")
            time.sleep(0.1)

    def wait_for(self, predicate: Callable[[dict], bool], limit: float = 60) -> list[dict]:
        """Events received until one matches ``predicate`` (that one last)."""
        seen = []
        deadline = time.monotonic() + limit
        while True:
            try:
                event = self.events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no matching event; received {seen}") from None
            seen.append(event)
            if predicate(event):
                return seen

    def recorded_events(self) -> int:
        """Events the kernel put in our instance's ring buffer so far (read or not), from per-CPU stats."""
        total = 0
        for stats in self.instance.glob("per_cpu/cpu*/stats"):
            fields = dict(line.split(": ", 1) for line in stats.read_text().splitlines() if ": " in line)
            total += int(fields["entries"]) + int(fields["read events"]) + int(fields["overrun"])
        return total

    def stop(self, signum: int = signal.SIGTERM) -> int:
        self.proc.send_signal(signum)
        try:
            return self.proc.wait(timeout=60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()


def _reads(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""
