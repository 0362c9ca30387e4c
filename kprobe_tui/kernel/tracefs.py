"""Reading and writing tracefs control files, and the kernel's error_log.

Writes use ``os.open``/``os.write`` with one definition per ``write()`` call: Python's buffered
append mode seeks, which tracefs answers with EINVAL, and the kernel parses each write on its own.

``Tracefs.write`` is the one place text reaches the kernel, so it is where a write is refused
when it could say more than one thing: the kernel runs every line of a write to a command file
as a command of its own (``trace_parse_run_command``), so a newline inside the text, a control
character, a ``#`` (the rest of the line becomes a comment) or byte 0xa0 (the kernel's parser
takes it for a space) never leaves here; nor does a line longer than the kernel takes, which it
refuses with a bare EINVAL and a note in dmesg only.
"""

from __future__ import annotations

import errno
import os
import re
from dataclasses import dataclass
from pathlib import Path

from kprobe_tui.blocking import blocking
from kprobe_tui.errors import UserError
from kprobe_tui.kernel.permission import denied

__all__ = ["KERNEL_SPACE_BYTE", "KernelRefused", "MAX_COMMAND_LINE", "MAX_FILTER_BYTES", "Tracefs",
           "control_character", "describe_character"]

# Files the kernel reads as commands, one per line, '#' starting a comment (trace_parse_run_command).
COMMAND_FILES = frozenset({"kprobe_events", "uprobe_events", "dynamic_events", "synthetic_events"})
# trace_parse_run_command copies at most WRITE_BUFSIZE - 1 (4095) bytes at a time and needs the
# newline among them: a line of 4094 bytes is taken, 4095 is "Line length is too long" (dmesg only).
# Measured on 6.18 here and in the 6.1 and 6.12 guests (tests/kernel/test_untrusted_guest.py).
MAX_COMMAND_LINE = 4094
# event_filter_write refuses a write of PAGE_SIZE (4096) bytes or more with EINVAL and no error_log entry.
MAX_FILTER_BYTES = 4095
# The kernel's isspace() (lib/ctype.c) counts Latin-1's no-break space: argv_split cuts a word there.
KERNEL_SPACE_BYTE = 0xA0


def control_character(text: str) -> int:
    """The index of the first control character (C0, DEL or C1; newlines and tabs included), or -1."""
    for index, char in enumerate(text):
        code = ord(char)
        if code < 0x20 or 0x7F <= code <= 0x9F:
            return index
    return -1


def describe_character(char: str) -> str:
    """``newline (U+000A)``: a character named so that a message shows it without printing it."""
    names = {"\n": "a newline", "\r": "a carriage return", "\t": "a tab", "\x1b": "an escape", "\x00": "a NUL"}
    return f"{names.get(char, 'a control character')} (U+{ord(char):04X})"


@dataclass
class KernelErrorLog:
    """One entry of tracefs ``error_log``: the kernel's own words and where in our command."""

    source: str  # e.g. "trace_kprobe", "event filter parse error"
    message: str  # e.g. "Invalid register name"
    command: str
    caret: int  # column in ``command`` the kernel points at, -1 if none
    time: str = ""  # the kernel's timestamp: tells two entries with the same words apart

    def render(self) -> str:
        pointer = f"\n  {' ' * self.caret}^" if self.caret >= 0 else ""
        return f"{self.source}: {self.message}\n  {self.command}{pointer}"


# "[  348.4] trace_uprobe: error: ..." and "[  348.4] event filter parse error: error: ..."
_ERROR_HEAD = re.compile(r"^\[\s*(?P<time>[\d.]+)\]\s+(?P<source>\S.*?):\s+error:\s+(?P<message>.*)$")


def parse_error_log_entries(text: str) -> list[KernelErrorLog]:
    """Every entry of an ``error_log``, oldest first: header line, ``Command:`` line, caret line."""
    lines = text.splitlines()
    entries = []
    for i, line in enumerate(lines):
        head = _ERROR_HEAD.match(line)
        if not head:
            continue
        command, caret = "", -1
        if i + 1 < len(lines) and lines[i + 1].lstrip().startswith("Command:"):
            raw = lines[i + 1]
            prefix = raw.index("Command:") + len("Command: ")
            command = raw[prefix:]
            if i + 2 < len(lines) and lines[i + 2].strip() == "^":
                caret = lines[i + 2].index("^") - prefix
        entries.append(KernelErrorLog(head["source"], head["message"], command, caret, head["time"]))
    return entries


def parse_error_log(text: str) -> KernelErrorLog | None:
    """The last entry of an ``error_log``."""
    entries = parse_error_log_entries(text)
    return entries[-1] if entries else None


def entry_for(before: str, after: str, command: str) -> KernelErrorLog | None:
    """The entry the kernel wrote for ``command``: new since ``before`` and about this very text.

    error_log is shared by every writer of tracefs, so the newest entry may be someone else's;
    the kernel logs a probe definition as its words joined by single spaces, a filter as written.
    """
    seen = {(e.time, e.source, e.message, e.command) for e in parse_error_log_entries(before)}
    wanted = " ".join(command.split())
    for entry in reversed(parse_error_log_entries(after)):
        if (entry.time, entry.source, entry.message, entry.command) not in seen and " ".join(entry.command.split()) == wanted:
            return entry
    return None


class KernelRefused(UserError):
    """The kernel rejected a write (or would: a line longer than it takes); ``log`` holds its error_log entry."""

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
        """Whether a file is there; a UserError when this user may not look (tracefs is 0700 root's)."""
        target = self.root / rel
        try:
            os.stat(target)
        except (FileNotFoundError, NotADirectoryError):
            return False
        except OSError as exc:
            raise _access_error("look at", target, exc, os.F_OK) from exc
        return True

    def listdir(self, rel: str) -> list[str]:
        """The names in a directory ([] when there is none); a UserError when this user may not list it."""
        target = self.root / rel
        try:
            return sorted(os.listdir(target))
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:
            raise _access_error("list", target, exc, os.R_OK | os.X_OK) from exc

    def read(self, rel: str) -> str:
        """The text of a control file, or a UserError naming the file and the reason."""
        target = self.root / rel
        try:
            return target.read_text(errors="replace")
        except OSError as exc:
            raise _access_error("read", target, exc, os.R_OK) from exc

    def write(self, rel: str, text: str, append: bool = True) -> None:
        """Write one command to a control file; a refusal carries the kernel's error_log entry for it."""
        target = self.root / rel
        blocking(f"writing {target}")
        if not self.writable:
            raise UserError(f"cannot write {target}: this is a captured snapshot, read-only")
        data = check_write(target, text)
        log_before = self._error_log_text()
        flags = os.O_WRONLY | (os.O_APPEND if append else os.O_TRUNC)
        try:
            fd = os.open(target, flags)
        except OSError as exc:
            raise _access_error("open for writing", target, exc, os.W_OK) from exc
        try:
            os.write(fd, data)
        except OSError as exc:
            log = entry_for(log_before, self._error_log_text(), text)
            reason = log.message if log else (exc.strerror or str(exc))
            raise KernelRefused(f"the kernel refused {text.strip()!r} in {target}: {reason}", "", log) from exc
        finally:
            os.close(fd)

    def _error_log_text(self) -> str:
        # error_log exists only at the top of tracefs and in each instance (an instance's filter errors go there).
        for candidate in (self.root / "error_log", self.root.parent.parent / "error_log"):
            try:  # anyone's command is logged there, bytes and all: one that is not UTF-8 must not stop ours
                return candidate.read_text(errors="replace")
            except OSError:
                continue
        return ""

    def last_error(self) -> KernelErrorLog | None:
        return parse_error_log(self._error_log_text())


def check_write(target: Path, text: str) -> bytes:
    """``text`` as the bytes of one command for ``target``, or a UserError saying why it is not one."""
    body = text[:-1] if text.endswith("\n") else text
    bad = control_character(body)
    if bad >= 0:
        raise UserError(f"refused to write {body!r} to {target}: {describe_character(body[bad])} at column {bad + 1}",
                        "one write to tracefs carries exactly one command: remove the control character")
    try:
        data = text.encode()
    except UnicodeEncodeError as exc:
        raise UserError(f"refused to write {body!r} to {target}: not valid UTF-8 at column {exc.start + 1}") from None
    size = len(data) - (len(text) - len(body))
    if target.name in COMMAND_FILES:
        if "#" in body:
            raise UserError(f"refused to write {body!r} to {target}: the kernel reads the rest of a line after '#' "
                            f"as a comment (column {body.index('#') + 1})", "remove the '#'")
        if KERNEL_SPACE_BYTE in data:
            raise UserError(f"refused to write {body!r} to {target}: byte 0xa0 in its UTF-8, which the kernel's "
                            "parser takes for a space", "use a name or path in plain ASCII")
        if size > MAX_COMMAND_LINE:
            raise KernelRefused(f"refused to write a line of {size} bytes to {target}: the kernel takes at most "
                                f"{MAX_COMMAND_LINE} (it says 'Line length is too long' in dmesg only)",
                                "capture fewer or shorter arguments, or use a shorter path")
    elif target.name == "filter" and size > MAX_FILTER_BYTES:
        raise KernelRefused(f"refused to write a filter of {size} bytes to {target}: the kernel takes at most "
                            f"{MAX_FILTER_BYTES} in a filter file", "write a shorter filter")
    return data


def _access_error(verb: str, target: Path, exc: OSError, mode: int) -> UserError:
    """``cannot read X: you are uid 1000 and /sys/kernel/tracing is root-owned (group root) mode 0700``."""
    reason = exc.strerror or str(exc)
    if exc.errno in (errno.EACCES, errno.EPERM):
        reason = denied(target, mode) or reason
    return UserError(f"cannot {verb} {target}: {reason}", _access_hint(exc))


def _access_hint(exc: OSError) -> str:
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "run as root, or ask an admin for group access (chgrp -R <group> the tracefs mount)"
    if exc.errno == errno.ENOENT:
        return "this kernel does not provide that file (see: kprobe-tui doctor)"
    return ""
