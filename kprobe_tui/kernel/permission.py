"""What this process may do to a file, and when it may not, why, in plain words naming what stops it.

Below ``tracefs`` (whose access errors say why) and ``capabilities`` (which reads tracefs): both ask here.
"""

from __future__ import annotations

import grp
import os
import pwd
from pathlib import Path

__all__ = ["denied", "may", "who"]


def may(path: Path, mode: int) -> bool:
    """``os.access`` with this process's effective ids and capabilities (what it can really do),
    not the real ids access(2) checks by default."""
    return os.access(path, mode, effective_ids=os.access in os.supports_effective_ids)


def who() -> str:
    return "root" if os.geteuid() == 0 else f"uid {os.geteuid()}"


_MODE_WORDS = {os.R_OK: "read", os.W_OK: "write", os.X_OK: "enter"}


def denied(path: Path, mode: int) -> str | None:
    """Why this user cannot use ``path`` as ``mode`` (``os.R_OK``/``W_OK``/``X_OK``, or'ed), in plain
    words naming the file or directory that stops it (``you are uid 1000 and /sys/kernel/tracing/
    uprobe_events is root-owned mode 0640``); None when nothing does."""
    path = Path(path)
    for directory in reversed(path.parents):
        if not may(directory, os.X_OK):
            return _blocked_by(directory, "enter")
    if may(path, mode):
        return None
    if not path.exists():
        return f"{path} does not exist"
    return _blocked_by(path, " and ".join(word for bit, word in _MODE_WORDS.items() if mode & bit))


def _blocked_by(path: Path, wanted: str) -> str:
    try:
        status = path.stat()
    except OSError as exc:
        return f"you are {who()} and cannot {wanted} {path} ({exc.strerror})"
    try:
        owner = pwd.getpwuid(status.st_uid).pw_name
    except KeyError:
        owner = f"uid {status.st_uid}"
    try:
        group = grp.getgrgid(status.st_gid).gr_name
    except KeyError:
        group = f"gid {status.st_gid}"
    if os.statvfs(path).f_flag & os.ST_RDONLY and wanted != "enter":
        return f"{path} is on a read-only mount"
    return f"you are {who()} and {path} is {owner}-owned (group {group}) mode {status.st_mode & 0o7777:04o}"
