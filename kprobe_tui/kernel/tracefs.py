"""Reading and writing tracefs control files, and the kernel's error_log.

Writes use ``os.open``/``os.write`` with one definition per ``write()`` call: Python's buffered
append mode seeks, which tracefs answers with EINVAL, and the kernel parses each write on its own.
"""

from __future__ import annotations

import errno
import os
import re
from dataclasses import dataclass
from pathlib import Path

from kprobe_tui.errors import UserError

@dataclass
class KernelErrorLog:
    """The last entry of tracefs ``error_log``: the kernel's own words and where in our command."""

    source: str  # e.g. "trace_kprobe"
    message: str  # e.g. "Invalid register name"
    command: str
    caret: int  # column in ``command`` the kernel points at, -1 if none

    def render(self) -> str:
        pointer = f"\n  {' ' * self.caret}^" if self.caret >= 0 else ""
        return f"{self.source}: {self.message}\n  {self.command}{pointer}"


_ERROR_HEAD = re.compile(r"^\[\s*[\d.]+\]\s+(?P<source>[\w-]+):\s+error:\s+(?P<message>.*)$")


def parse_error_log(text: str) -> KernelErrorLog | None:
    """The last entry of an ``error_log``: header line, ``Command:`` line, caret line."""
    lines = text.splitlines()
    for i in range(len(lines) - 1, -1, -1):
        head = _ERROR_HEAD.match(lines[i])
        if not head:
            continue
        command, caret = "", -1
        if i + 1 < len(lines) and lines[i + 1].lstrip().startswith("Command:"):
            raw = lines[i + 1]
            prefix = raw.index("Command:") + len("Command: ")
            command = raw[prefix:]
            if i + 2 < len(lines) and lines[i + 2].strip() == "^":
                caret = lines[i + 2].index("^") - prefix
        return KernelErrorLog(head["source"], head["message"], command, caret)
    return None


class KernelRefused(UserError):
    """The kernel rejected a write; ``log`` holds its error_log entry when it wrote one."""

    def __init__(self, message: str, hint: str = "", log: KernelErrorLog | None = None) -> None:
        super().__init__(message, hint)
        self.log = log


class Tracefs:
    """Reads and writes control files under one tracefs root (or an instance directory)."""

    def __init__(self, root: Path, writable: bool = True) -> None:
        self.root = Path(root)
        self.writable = writable

    def path(self, rel: str) -> Path:
        return self.root / rel

    def exists(self, rel: str) -> bool:
        return (self.root / rel).exists()

    def read(self, rel: str) -> str:
        """The text of a control file, or a UserError naming the file and the reason."""
        target = self.root / rel
        try:
            return target.read_text(errors="replace")
        except OSError as exc:
            raise UserError(f"cannot read {target}: {exc.strerror or exc}", _access_hint(exc)) from exc

    def write(self, rel: str, text: str, append: bool = True) -> None:
        """Write one command to a control file; a refusal carries the kernel's error_log entry."""
        target = self.root / rel
        if not self.writable:
            raise UserError(f"cannot write {target}: this is a captured snapshot, read-only")
        log_before = self._error_log_text()
        flags = os.O_WRONLY | (os.O_APPEND if append else os.O_TRUNC)
        try:
            fd = os.open(target, flags)
        except OSError as exc:
            raise UserError(f"cannot open {target} for writing: {exc.strerror or exc}", _access_hint(exc)) from exc
        try:
            os.write(fd, text.encode())
        except OSError as exc:
            log_after = self._error_log_text()
            log = parse_error_log(log_after) if log_after != log_before else None
            reason = log.message if log else (exc.strerror or str(exc))
            raise KernelRefused(f"the kernel refused {text.strip()!r} in {target}: {reason}", "", log) from exc
        finally:
            os.close(fd)

    def _error_log_text(self) -> str:
        # error_log exists only at the top of tracefs, also when self.root is an instance.
        for candidate in (self.root / "error_log", self.root.parent.parent / "error_log"):
            try:
                return candidate.read_text()
            except OSError:
                continue
        return ""

    def last_error(self) -> KernelErrorLog | None:
        return parse_error_log(self._error_log_text())


def _access_hint(exc: OSError) -> str:
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "run as root, or ask an admin for group access (chgrp -R <group> the tracefs mount)"
    if exc.errno == errno.ENOENT:
        return "this kernel does not provide that file (see: kprobe-tui doctor)"
    return ""
