"""What this run puts in the kernel is taken out when the run ends, however it ends.

Probe groups and tracefs instances made for one run carry the run's name, ``kptui_<pid>`` (or
``kptui_<pid>_<n>`` when that name is taken). Each object is registered here with the action that
removes it; the actions run (newest first) on normal exit, on an unhandled exception, and on
SIGTERM, SIGHUP (the SSH connection dropped) and SIGINT. After SIGKILL nothing can run, so a
later ``kprobe-tui cleanup`` finds the names of dead runs (``is_stale``) and removes their objects.

Whether a run is alive is decided by a lock, not by its PID. A run holds an flock on
``/run/kprobe-tui/<name>.lock`` from the moment it takes its name until it exits; the kernel
drops the lock when the process dies, SIGKILL included, so a name whose lock anyone can take is
a dead run's. A PID cannot say this: PIDs are reused, a PID means something only in its own PID
namespace (a run under ``unshare --pid`` is PID 1 there and cannot see the host's processes, and
the host's PID 1 is init), and process start times are shifted by time namespaces. An flock is
on the file itself, the same from every namespace that shares /run, and no reused PID can hold
it. Taking the name means creating its lock file (``O_EXCL``, already locked), so two runs never
share a name, whatever their PIDs. The file records the boot it belongs to: a /run shared with
another kernel (a QEMU guest mounting the host's root) is not taken for ours.

Where the locks are: root's in ``/run/kprobe-tui``, a directory only root writes (0755: a user who
could write there could fill /run, a small shared tmpfs, or make ``made/`` before root, see
registry.py); anyone else's in ``$XDG_RUNTIME_DIR/kprobe-tui``, or when that is unset (su, sudo,
setpriv and cron drop it) in ``/run/user/<uid>/kprobe-tui``, the directory logind makes for the
user, where XDG_RUNTIME_DIR points in a login session. Not /tmp: another user can make any name
there first, and root would not know to look. Root judges users' runs by their locks under
/run/user; a user judges root's by ``/run/kprobe-tui`` (its 0600 locks say only "not yours": never
stale). A directory that is not a plain directory of its owner that no one else may write is not
used, with a warning on stderr; a lock held anywhere makes its name live, whatever is said elsewhere.

A name without a lock file we can see (made by an older kprobe-tui, or by a run with no directory
for its lock) is judged the old way, by its PID, and only from the initial PID namespace, where
every PID is visible; from anywhere else it is never called stale.
"""

from __future__ import annotations

import atexit
import errno
import fcntl
import functools
import json
import os
import re
import secrets
import signal
import stat
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

RUN_PREFIX = "kptui_"
_RUN_NAME = re.compile(rf"{RUN_PREFIX}(\d+)(?:_(\d+))?")
LOCK_DIR = Path("/run/kprobe-tui")  # root's run locks and records (registry.py)
USERS_RUNTIME = Path("/run/user")  # logind's runtime directories, /run/user/<uid>: other users' locks
_STATE_NAME = "kprobe-tui"  # our directory in a user's runtime directory
_LOCK_SUFFIX = ".lock"
_INIT_PID_NAMESPACE = 0xEFFFFFFC  # PROC_PID_INIT_INO (include/linux/proc_ns.h): the initial PID namespace
_MAX_SUFFIX = 1000

HELD, FREE, ABSENT, UNKNOWN = "held", "free", "absent", "unknown"


@dataclass
class _Claim:
    name: str
    lock: Path | None  # the lock file; None when /run could not take one
    fd: int | None  # holding its lock


# This process's names, by the PID it had when it took them: a forked child takes its own (its copies
# of the parent's locks are closed at the fork), and the screenshot tests pretend to be PID 4242.
_claims: dict[int, _Claim] = {}
_claim_lock = threading.RLock()  # re-entrant: a signal handler may end the run while the main thread holds it


def run_name() -> str:
    """The name of this run's probe group and tracefs instance, taken (and locked) on first use."""
    with _claim_lock:
        pid = os.getpid()
        if pid not in _claims:
            _claims[pid] = _take_name(pid)
        undo.install()
        return _claims[pid].name


def own_name() -> str | None:
    """This run's name if it has taken one (asking never takes one: ``list`` makes nothing)."""
    claim = _claims.get(os.getpid())
    return claim.name if claim is not None else None


def _forget_parents_names() -> None:
    """In a forked child: the names are the parent's, and so are the locks (it still holds them)."""
    for claim in _claims.values():
        if claim.fd is not None:
            os.close(claim.fd)
    _claims.clear()


os.register_at_fork(after_in_child=_forget_parents_names)


def _pid_of(name: str) -> int | None:
    """The PID in a run-scoped name (in the namespace of the run that made it), or None for names not ours."""
    match = _RUN_NAME.fullmatch(name)
    return int(match.group(1)) if match else None


def is_run_scoped(name: str) -> bool:
    """Whether a group or instance name is one kprobe-tui gives a run (never a name a user may pick)."""
    return _RUN_NAME.fullmatch(name) is not None


def is_stale(name: str) -> bool:
    """A run-scoped name whose run is gone (killed with SIGKILL, or crashed hard)."""
    if not is_run_scoped(name) or name == own_name():
        return False
    state = lock_state(name)
    if state != ABSENT:
        return state == FREE
    pid = _pid_of(name)
    return name == f"{RUN_PREFIX}{pid}" and in_initial_pid_namespace() and not psutil.pid_exists(pid)


def in_initial_pid_namespace() -> bool:
    try:
        return os.stat("/proc/self/ns/pid").st_ino == _INIT_PID_NAMESPACE
    except OSError:
        return False


def lock_state(name: str) -> str:
    """HELD (its run is alive), FREE (dead), ABSENT (no lock file of this boot), UNKNOWN (not ours to open).

    Held in any directory we look in means alive: a user's file elsewhere cannot make a live run dead.
    """
    states = {_lock_state_in(directory, owner, name) for directory, owner in _lock_dirs()}
    return next((state for state in (HELD, UNKNOWN, FREE) if state in states), ABSENT)


def _lock_state_in(directory: Path, owner: int | None, name: str) -> str:
    """The state of ``name``'s lock in one directory; a file there not ``owner``'s (when given) is ABSENT."""
    try:
        fd = os.open(directory / f"{name}{_LOCK_SUFFIX}", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return ABSENT
    except OSError:
        return UNKNOWN  # another user's (0600), or not a plain file
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            return UNKNOWN
        if owner is not None and status.st_uid != owner:
            return ABSENT
        if os.pread(fd, 64, 0).decode(errors="replace").split(" ")[-1].strip() != boot_id():
            return ABSENT
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return HELD
        return FREE
    finally:
        os.close(fd)


def forget(name: str) -> None:
    """Remove a dead run's lock file, once its objects are gone (a live run's is never touched)."""
    if name == own_name():
        return
    for directory, _owner in _lock_dirs():
        _unlink_if_free(directory, f"{name}{_LOCK_SUFFIX}")


def dead_runs() -> list[str]:
    """Names whose lock file is free: runs that died, whether or not they left anything in tracefs."""
    found = set()
    for directory, _owner in _lock_dirs():
        try:
            names = os.listdir(directory)
        except OSError:
            continue
        for entry in names:
            name = entry.removesuffix(_LOCK_SUFFIX)
            if entry.endswith(_LOCK_SUFFIX) and is_run_scoped(name) and name != own_name() and lock_state(name) == FREE:
                found.add(name)
    return sorted(found)


@functools.lru_cache(maxsize=1)
def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown-boot"


def read_record(path: Path, limit: int, owners: tuple[int, ...]) -> dict | None:
    """A record a run of ours left (probe records, a borrowed tracer's settings): the JSON object in ``path``
    when it is a regular file (never through a symlink) of one of ``owners``, of at most ``limit`` bytes,
    written during this boot; None for anything else."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode) or status.st_uid not in owners:
            return None
        data = json.loads(os.read(fd, limit + 1)[:limit])
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    return data if isinstance(data, dict) and data.get("boot") == boot_id() else None


def lock_dir(create: bool = False) -> Path | None:
    """Where this user's runs lock their names (see the module's docstring); None when there is none."""
    uid = os.geteuid()
    if uid == 0:
        return root_dir(create)
    variable = os.environ.get("XDG_RUNTIME_DIR")
    runtime = Path(variable) if variable and os.path.isabs(variable) else USERS_RUNTIME / str(uid)
    if trusted_dir(runtime, uid, "this user's runtime directory") is None:
        return None
    return trusted_dir(runtime / _STATE_NAME, uid, "run locks", create=create)


def root_dir(create: bool = False) -> Path | None:
    """/run/kprobe-tui, when only root writes it (made by root on first use)."""
    return trusted_dir(LOCK_DIR, 0, "run locks and probe records", create=create and os.geteuid() == 0)


def _lock_dirs() -> list[tuple[Path, int | None]]:
    """The directories a run's lock may be in, each with whose locks count there (None: anyone's)."""
    own = lock_dir()
    if os.geteuid() != 0:
        root = root_dir()
        return [(directory, None) for directory in (own, root) if directory is not None]
    found: list[tuple[Path, int | None]] = [(own, None)] if own is not None else []  # any owner's: users locked here before
    try:
        users = sorted(entry for entry in os.listdir(USERS_RUNTIME) if entry.isdigit())
    except OSError:
        users = []
    for user in users:
        directory = trusted_dir(USERS_RUNTIME / user / _STATE_NAME, int(user), "run locks", quiet=True)
        if directory is not None:
            found.append((directory, int(user)))
    return found


_warned: set[str] = set()


def trusted_dir(path: Path, owner: int, holding: str, create: bool = False, quiet: bool = False) -> Path | None:
    """``path`` when it is a directory (not a symlink to one) of ``owner`` that no one else may write;
    made 0755 when missing and ``create``. Anything else is not used, and said once on stderr (unless
    ``quiet``): what it would have held is not kept this run."""
    if create:
        try:
            os.mkdir(path, 0o755)
        except OSError:
            pass  # there already (checked below), or not ours to make: nothing is kept
    problem: str | None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        symlink = exc.errno in (errno.ELOOP, errno.ENOTDIR)
        problem = "is a symlink or not a directory" if symlink else f"cannot be opened ({exc.strerror})"
    else:
        problem = _dir_problem(fd, path, owner)
    if problem is None:
        return path
    message = f"kprobe-tui: not using {path} for {holding}: it {problem}; remove it, or fix its owner and mode"
    if not quiet and message not in _warned:
        _warned.add(message)
        print(message, file=sys.stderr)
    return None


def _dir_problem(fd: int, path: Path, owner: int) -> str | None:
    """What makes an open directory untrustworthy, or None; closes ``fd``."""
    try:
        status = os.fstat(fd)
        if status.st_uid != owner:
            return f"is owned by uid {status.st_uid}, not {owner}"
        if status.st_mode & 0o022 and path == LOCK_DIR and os.geteuid() == 0:
            os.fchmod(fd, 0o755)  # an earlier kprobe-tui made it 1777 for every user's locks: root's alone now
        elif status.st_mode & 0o022:
            return f"is writable by others (mode {stat.S_IMODE(status.st_mode):04o})"
        return None
    finally:
        os.close(fd)


def _take_name(pid: int) -> _Claim:
    """``kptui_<pid>``, or the first free ``kptui_<pid>_<n>``: a name no other run holds or left."""
    directory = lock_dir(create=True)
    if directory is None:
        return _Claim(f"{RUN_PREFIX}{pid}", None, None)
    for suffix in range(_MAX_SUFFIX):
        name = f"{RUN_PREFIX}{pid}" + (f"_{suffix}" if suffix else "")
        if lock_state(name) != ABSENT:
            continue  # locked by another user's run (another PID namespace), or left by a dead one
        try:
            fd = _create_locked(directory, name, pid)
        except OSError:
            break  # /run not writable for us: fall back to the name alone
        if fd is not None:
            return _Claim(name, directory / f"{name}{_LOCK_SUFFIX}", fd)
    return _Claim(f"{RUN_PREFIX}{pid}", None, None)


def _create_locked(directory: Path, name: str, pid: int) -> int | None:
    """The lock file of ``name``, created already locked (None when it exists: the name is taken).

    It is written and locked under a temporary name, then linked into place, so no one ever
    sees it unlocked while its run lives.
    """
    temporary = directory / f".{name}.{secrets.token_hex(4)}"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, f"pid {pid} boot {boot_id()}\n".encode())
        os.link(temporary, directory / f"{name}{_LOCK_SUFFIX}")
    except BaseException as exc:
        os.close(fd)
        if isinstance(exc, FileExistsError):
            return None
        raise
    finally:
        try:
            os.unlink(temporary)
        except OSError:
            pass
    return fd


def _unlink_if_free(directory: Path, entry: str) -> None:
    """Remove a lock no one holds; through the directory's descriptor, so that a user who owns it (root
    cleans up after users) cannot swap it for a symlink between the check and the unlink."""
    try:
        directory_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        fd = os.open(entry, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=directory_fd)
    except OSError:
        os.close(directory_fd)
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.unlink(entry, dir_fd=directory_fd)  # while we hold it: no run can be holding it now
    except OSError:
        pass
    finally:
        os.close(fd)
        os.close(directory_fd)


def _release_names(failed: bool) -> None:
    """At exit: a lock file goes when everything was removed; else it stays, unlocked, for cleanup to find."""
    with _claim_lock:
        for claim in _claims.values():
            if claim.fd is None:
                continue
            if not failed and claim.lock is not None:  # a claim holding a lock has its file
                try:
                    os.unlink(claim.lock)
                except OSError as exc:
                    if exc.errno != errno.ENOENT:
                        print(f"kprobe-tui: could not remove the lock of {claim.name}: {exc.strerror}", file=sys.stderr)
            os.close(claim.fd)
            claim.fd = None


class _Undo:
    """A stack of removal actions; each runs once, failures are reported and do not stop the rest."""

    def __init__(self) -> None:
        # Re-entrant: the signal handler runs on the main thread, possibly while it is inside push().
        self._lock = threading.RLock()
        self._actions: dict[int, tuple[str, Callable[[], None]]] = {}
        self._next = 0
        self._at_exit = False
        self._on_signals = False
        self._failed = False

    def push(self, description: str, action: Callable[[], None]) -> int:
        with self._lock:
            self.install()
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
        self._failed = self._failed or bool(failures)
        return failures

    def finish(self) -> None:
        """The end of the run: undo everything, then let go of the run's name."""
        self.run_all()
        _release_names(self._failed)

    def install(self) -> None:
        """Run ``finish`` at exit, and on SIGTERM/SIGHUP once called from the main thread (only it may
        set signal handlers; the TUI takes its name on a worker thread)."""
        if not self._at_exit:
            self._at_exit = True
            atexit.register(self.finish)
        if not self._on_signals and threading.current_thread() is threading.main_thread():
            self._on_signals = True
            for signum in (signal.SIGTERM, signal.SIGHUP):
                signal.signal(signum, self._on_signal)

    def _on_signal(self, signum, _frame) -> None:
        self.finish()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


undo = _Undo()
