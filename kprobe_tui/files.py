"""Files named from outside (the command line, a config, debug info, an archive): opened knowing their
type, read with a bound, and written atomically, never through a symlink we did not choose.

A FIFO opened for reading blocks until someone writes; a device such as /dev/zero never ends; a
directory reads as an error deep inside a parser. So a file is stat'ed first (nothing is opened
that is not a regular file: opening some devices has side effects), opened with O_NONBLOCK (a FIFO
swapped in meanwhile cannot block the open) and fstat'ed again on the descriptor we read.
"""

from __future__ import annotations

import errno
import io
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from kprobe_tui.errors import UserError

MiB = 1 << 20

_KINDS = [(stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")]


def _kind(mode: int) -> str:
    return next((kind for test, kind in _KINDS if test(mode)), "not a regular file")


class NoSuchFile(UserError):
    """The file is not there (callers for whom a missing file is normal catch this one alone)."""


def _refuse(what: str, path, problem: str, hint: str = "") -> UserError:
    return UserError(f"{what} {path}: {problem}", hint or f"give the path of a regular file as the {what}")


def open_regular(path: str | Path, what: str) -> io.BufferedReader:
    """``path`` opened for binary reading; a UserError naming ``what`` (e.g. "--kallsyms file") when it
    is missing, unreadable, or not a regular file."""
    try:
        mode = os.stat(path).st_mode
        if not stat.S_ISREG(mode):
            raise _refuse(what, path, f"is {_kind(mode)}, not a regular file")
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise NoSuchFile(f"{what} {path}: no such file", f"give the path of a regular file as the {what}") from None
    except PermissionError:
        raise _refuse(what, path, "permission denied", "run as a user who may read it, or copy it somewhere readable") from None
    except OSError as exc:
        raise _refuse(what, path, f"cannot open it ({exc.strerror or exc})") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):  # replaced between the stat and the open
        os.close(fd)
        raise _refuse(what, path, f"is {_kind(mode)}, not a regular file")
    os.set_blocking(fd, True)
    return io.BufferedReader(_CheckedFile(fd, path, what))


class _CheckedFile(io.FileIO):
    """A file whose failed reads are a UserError naming it. A regular file can still refuse to be read:
    /proc/self/mem is one (EIO at offset 0), and a disk can fail; every reader of it would otherwise
    meet a bare OSError deep inside a parser."""

    def __init__(self, fd: int, path: str | Path, what: str) -> None:
        super().__init__(fd, "rb")
        self.path, self.what = path, what

    def readinto(self, buffer) -> int | None:
        try:
            return super().readinto(buffer)
        except OSError as exc:
            raise self._unreadable(exc) from None

    def readall(self) -> bytes:
        try:
            return super().readall()
        except OSError as exc:
            raise self._unreadable(exc) from None

    def _unreadable(self, exc: OSError) -> UserError:
        return _refuse(self.what, self.path, f"cannot read it ({exc.strerror or exc})",
                       f"check that it is the {self.what} you meant")


def read_regular(path: str | Path, what: str, limit: int) -> bytes:
    """A regular file's bytes, refused beyond ``limit`` (a /proc file says size 0: the bound is on what is read)."""
    with open_regular(path, what) as stream:
        data = stream.read(limit + 1)
    if len(data) > limit:
        raise _refuse(what, path, f"is larger than {limit // MiB} MiB, more than such a file ever is",
                      f"check that it is the {what} you meant")
    return data


def is_regular(path: str | Path) -> bool:
    """A regular file (following symlinks); False for anything missing, unreadable or special."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def write_atomic(path: Path, write: Callable[[BinaryIO], object], *, replace: bool, what: str) -> None:
    """Write a new file at ``path`` (mode 0600) in one step: a temporary file in the same directory,
    fsync'ed, then renamed over. A crash or a full disk leaves any old file as it was.

    ``path`` is never written through: a symlink there is refused. An existing file is refused unless
    ``replace``; without it the rename is a hard link, which fails if the name appeared meanwhile.
    """
    try:
        existing = os.lstat(path)
    except FileNotFoundError:
        existing = None
    if existing is not None:
        if stat.S_ISLNK(existing.st_mode):
            raise _refuse(what, path, f"is a symbolic link (to {os.readlink(path)}): refusing to write through it",
                          "give the path of the file itself")
        if not stat.S_ISREG(existing.st_mode):
            raise _refuse(what, path, f"is {_kind(existing.st_mode)}: refusing to replace it", "give another path")
        if not replace:
            raise _refuse(what, path, "already exists", "pass --force to replace it, or give another path")
    import tempfile  # (~5 ms of imports every reader would pay; only writers need it)

    directory = path.parent
    try:
        fd, temporary = tempfile.mkstemp(dir=directory, prefix=f".{path.name}.", suffix=".part")  # 0600, O_EXCL
    except OSError as exc:
        raise _refuse(what, path, f"cannot create a file in {directory} ({exc.strerror or exc})") from None
    try:
        with os.fdopen(fd, "wb") as stream:
            write(stream)
            stream.flush()
            os.fsync(stream.fileno())
        _publish(Path(temporary), path, replace, what)
    except BaseException:
        try:
            os.unlink(temporary)
        except FileNotFoundError:
            pass
        raise
    _fsync_directory(directory)


def _publish(temporary: Path, path: Path, replace: bool, what: str) -> None:
    if replace:
        os.replace(temporary, path)  # replaces the name: a symlink put there meanwhile is replaced, not followed
        return
    try:
        os.link(temporary, path)
    except FileExistsError:
        raise _refuse(what, path, "already exists", "pass --force to replace it, or give another path") from None
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
            raise
        if os.path.lexists(path):  # a filesystem without hard links: check, then rename
            raise _refuse(what, path, "already exists", "pass --force to replace it, or give another path") from None
        os.rename(temporary, path)
        return
    os.unlink(temporary)


def _fsync_directory(directory: Path) -> None:
    """The rename itself durable (some filesystems do not allow fsync on a directory: fine)."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
