"""Download progress on stderr for the CLI: a line rewritten in place on a terminal, else nothing.

A pipe or ``--json`` stays quiet (a script reads stdout, a log would fill with progress), unless
DEBUGINFOD_PROGRESS is set, as elfutils' tools do: then a line every second.
"""

from __future__ import annotations

import shutil
import sys
import time

from kprobe_tui.debuginfo.debuginfod import Client, Progress, Settings

REPORT_EVERY = 1.0  # seconds between lines when stderr is not a terminal


def client(quiet: bool = False) -> Client:
    """A debuginfod client whose downloads are reported on stderr when a person is watching."""
    settings = Settings.from_environment()
    terminal = sys.stderr.isatty()
    if settings.progress or (terminal and not quiet):
        return Client(settings, progress=StderrProgress(terminal))
    return Client(settings)


def describe(progress: Progress) -> str:
    """``12.3/633.4 MB, 45.6 MB/s, 0:13 left: debug info of build-id 3f2a… from host``: the numbers
    first, as a narrow terminal cuts the end of the line."""
    return _printable(f"{progress.numbers}: {progress.what} from {progress.host}")


class StderrProgress:
    """The callback: one line, rewritten in place on a terminal; a line a second otherwise."""

    def __init__(self, terminal: bool) -> None:
        self.terminal = terminal
        self.last = 0.0

    def __call__(self, progress: Progress) -> None:
        line = f"kprobe-tui: downloading {describe(progress)}"
        if self.terminal:
            width = shutil.get_terminal_size((80, 24)).columns - 1
            sys.stderr.write("\r" + line[:width].ljust(width) + ("\n" if progress.finished else ""))
        elif progress.finished or time.monotonic() - self.last >= REPORT_EVERY:
            self.last = time.monotonic()
            sys.stderr.write(line + "\n")
        sys.stderr.flush()


def _printable(text: str) -> str:
    """A server's URL and DWARF's file names are not ours: no control character reaches the terminal."""
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)
