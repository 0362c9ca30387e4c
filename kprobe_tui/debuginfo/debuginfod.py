"""debuginfod client: debug info and source files by build-id over HTTP, cached as elfutils caches them.

Distributions serve both (Debian, Ubuntu, Fedora, Arch...), and gdb, perf and systemd-coredump ask
them through elfutils' libdebuginfod. This client reads the same variables and shares the same
cache, so what one tool fetched is there for the others:

  DEBUGINFOD_URLS         server URLs separated by spaces, tried in order. Unset or empty: off, and
                          no server is ever contacted (we never ask one the user did not name)
  DEBUGINFOD_CACHE_PATH   the cache; default ~/.debuginfod_client_cache when it exists, else
                          $XDG_CACHE_HOME/debuginfod_client (~/.cache/debuginfod_client)
  DEBUGINFOD_TIMEOUT      seconds a server may stay silent, and within which its answer's headers must
                          have come, before it is given up (default 90)
  DEBUGINFOD_MAXTIME      seconds one download may take in all (elfutils: unlimited by default; here
                          DEFAULT_MAXTIME, so a server sending a byte a second cannot hold us forever)
  DEBUGINFOD_MAXSIZE      bytes a file may have: a larger announced size is refused before reading,
                          a body growing past it is stopped (elfutils: unlimited by default; here
                          DEFAULT_MAXSIZE, or DEFAULT_SOURCE_MAXSIZE for a source file)
  DEBUGINFOD_RETRY_LIMIT  how often an interrupted transfer is resumed or restarted (default 2)
  DEBUGINFOD_PROGRESS     set: the CLI reports downloads on stderr even when it is not a terminal

The cache is elfutils' (debuginfod-client.c): ``<cache>/<build-id>/debuginfo`` and
``<cache>/<build-id>/source<escaped path>``, whose escaping changed in elfutils 0.192 (both forms
are read; the installed libdebuginfod's is written). A download goes to ``<name>.XXXXXX`` in the
same directory, locked while it grows, and is renamed into place only when complete and, for
debug info, only when its build-id is the one asked for: no reader ever sees a partial file, and
an interrupted or cancelled transfer leaves nothing behind. A cache hit of debug info is checked
the same way. The cache is used only when this user owns it and no other user can change the path
to it (root with a user's environment, ``sudo -E``, must not write through that user's symlinks);
its directories are made 0700, its files are 0400, and none is opened through a symlink. An empty file is elfutils' "the
servers said no" mark: honoured for ``cache_miss_s`` seconds (default 600) and written after a
404, as elfutils does.

Progress is a callback (``Progress``: bytes done, total, rate); a ``Cancel`` set from another
thread (the TUI's Escape) stops a transfer at once by shutting its socket down.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import os
import pwd
import re
import stat
import sysconfig
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote, urlsplit

from kprobe_tui import __version__
from kprobe_tui.debuginfo.elfsections import ElfSections
from kprobe_tui.elf import NotElf
from kprobe_tui.errors import UserError

if TYPE_CHECKING:
    import socket
    import urllib.request

__all__ = ["Cancel", "Client", "Progress", "Settings", "setup_report"]

# urllib, http.client and ssl are imported where a server is asked, not with this module: the CLI
# makes a Client on every run, and most runs find the debug info on disk (ssl alone is ~8 ms).

DEFAULT_TIMEOUT = 90  # elfutils' default_timeout
DEFAULT_RETRIES = 2  # elfutils' default_retry_limit
DEFAULT_CACHE_MISS = 600  # elfutils' cache_miss_default_s
# elfutils has no limit unless DEBUGINFOD_MAXTIME is set; we do, or a server sending a byte a second holds a
# download forever. Half an hour: Debian's 633 MB vmlinux debug file (the largest we fetch) at 0.35 MB/s.
DEFAULT_MAXTIME = 1800
# Likewise for size (DEBUGINFOD_MAXSIZE), or an endless body fills the cache's file system. 4 GiB: above the
# largest debug files distributions serve (LLVM's, ~3 GB, per elfutils PR27982, where MAXSIZE was added).
DEFAULT_MAXSIZE = 4 << 30
# A source file is text: the largest in the kernel tree (amdgpu's register headers) are tens of MB.
DEFAULT_SOURCE_MAXSIZE = 256 << 20
DOCTOR_DEADLINE = 10  # seconds doctor waits for each server's answer at most: it asks them one after another
CHUNK = 1 << 16
PROGRESS_INTERVAL = 0.1  # seconds between progress reports: a bar needs no more
BUILD_ID = re.compile(r"^[0-9a-f]{2,128}$")
# The public servers, named in messages as examples (never contacted unless the user lists them).
PUBLIC_SERVERS = "https://debuginfod.debian.net (Debian), https://debuginfod.ubuntu.com (Ubuntu), " \
                 "https://debuginfod.fedoraproject.org (Fedora), https://debuginfod.elfutils.org (all of them)"


@dataclass(frozen=True)
class Settings:
    """elfutils' environment variables, read once."""

    urls: tuple[str, ...]
    cache: Path
    timeout: float = DEFAULT_TIMEOUT
    retries: int = DEFAULT_RETRIES
    progress: bool = False  # DEBUGINFOD_PROGRESS is set
    maxtime: float = DEFAULT_MAXTIME
    maxsize: int | None = None  # None: DEBUGINFOD_MAXSIZE is unset (or 0), the defaults apply

    @classmethod
    def from_environment(cls, env: Mapping[str, str] = os.environ) -> Settings:
        """As elfutils reads them, except that 0 or unset MAXTIME and MAXSIZE mean our defaults, not "no limit"."""
        urls = tuple(dict.fromkeys(url.rstrip("/") for url in env.get("DEBUGINFOD_URLS", "").split() if url))
        maxsize = int(_number(env, "DEBUGINFOD_MAXSIZE", 0))
        return cls(urls, default_cache(env), _number(env, "DEBUGINFOD_TIMEOUT", DEFAULT_TIMEOUT),
                   int(_number(env, "DEBUGINFOD_RETRY_LIMIT", DEFAULT_RETRIES)), bool(env.get("DEBUGINFOD_PROGRESS")),
                   _number(env, "DEBUGINFOD_MAXTIME", DEFAULT_MAXTIME), maxsize or None)

    def size_limit(self, source: bool) -> int:
        """The most bytes a file may have: DEBUGINFOD_MAXSIZE, else the default for its kind."""
        return self.maxsize or (DEFAULT_SOURCE_MAXSIZE if source else DEFAULT_MAXSIZE)


def _number(env: Mapping[str, str], name: str, default: float) -> float:
    try:
        value = float(env.get(name, ""))
    except ValueError:
        return default
    return value if value > 0 else default


def default_cache(env: Mapping[str, str] = os.environ) -> Path:
    """Where elfutils puts its cache, and so where we do (make_cache_path in debuginfod-client.c)."""
    if env.get("DEBUGINFOD_CACHE_PATH"):
        return Path(env["DEBUGINFOD_CACHE_PATH"])
    home = Path(env.get("HOME") or "/")
    legacy = home / ".debuginfod_client_cache"
    if legacy.exists():
        return legacy
    xdg = env.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else home / ".cache") / "debuginfod_client"


def cache_problem(cache: Path) -> str | None:
    """Why this user may not use ``cache``, or None. It must be the effective user's, and each directory above it
    root's or theirs and not writable by every user (unless sticky, as /tmp): else another user could swap a
    symlink in and have our writes (root's, under ``sudo -E``) land where they chose. A group-writable
    directory is let be: with per-user groups (umask 002) it is the user's own."""
    euid = os.geteuid()
    real = Path(os.path.realpath(cache))
    for directory in (real, *real.parents):
        try:
            status = os.lstat(directory)
        except FileNotFoundError:
            continue  # we make it, 0700
        except OSError as exc:
            return f"the debuginfod cache {cache} cannot be checked: {directory}: {exc.strerror}"
        if directory == real and status.st_uid != euid:
            return f"the debuginfod cache {cache} belongs to {_user(status.st_uid)}, not to {_user(euid)} who runs this"
        if status.st_uid not in (euid, 0):
            return f"the debuginfod cache {cache} lies in {directory}, which belongs to {_user(status.st_uid)}"
        if status.st_mode & stat.S_IWOTH and not status.st_mode & stat.S_ISVTX:
            return f"the debuginfod cache {cache} lies in {directory}, which every user may write to"
    return None


def _user(uid: int) -> str:
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def _cache_hint() -> str:
    try:
        home = pwd.getpwuid(os.geteuid()).pw_dir
    except KeyError:
        home = "~"
    return (f"set DEBUGINFOD_CACHE_PATH to a directory of your own (e.g. {home}/.cache/debuginfod_client); "
            "under sudo, do not keep the user's environment (-E)")


def _own_directory(directory: Path) -> bool:
    """Whether the build-id directory exists; a UserError when it is not a directory of this user's (a symlink
    planted there would take our writes and give us its files)."""
    try:
        status = os.lstat(directory)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise UserError(f"{directory}: {exc.strerror}", "check the debuginfod cache (DEBUGINFOD_CACHE_PATH)") from None
    if stat.S_ISLNK(status.st_mode):
        problem = "is a symlink, not a directory: debuginfod clients never make one there"
    elif not stat.S_ISDIR(status.st_mode):
        problem = "is not a directory"
    elif status.st_uid != os.geteuid():
        problem = f"belongs to {_user(status.st_uid)}"
    else:
        return True
    raise UserError(f"{directory} {problem}", f"remove {directory}; the next download makes it anew")


def _regular_size(path: Path) -> int | None:
    """The size of the regular file at ``path``; None for anything else, a symlink included (never followed)."""
    try:
        status = os.lstat(path)
    except OSError:
        return None
    return status.st_size if stat.S_ISREG(status.st_mode) else None


# ---- cache names --------------------------------------------------------------------------


def source_names(path: str) -> tuple[str, str]:
    """The cache entry names of a source file: elfutils >= 0.192's, then 0.188-0.191's."""
    raw = path.encode("utf-8", "surrogateescape")
    digest = 5381  # djb2 over C chars, which are signed on x86-64
    for byte in raw:
        digest = (digest * 33 + (byte - 256 if byte > 127 else byte)) & 0xFFFFFFFFFFFFFFFF
    kept = bytes(b if chr(b).isascii() and (chr(b).isalnum() or b in b".-_") else 0x23 for b in raw)
    # NAME_MAX/2 bytes at most, the hash and '-' first: the last 117 characters of the path survive
    modern = f"source-{digest & 0xFFFFFFFF:08x}-{kept[-117:].decode()}"
    legacy = "source" + "".join("##" if c == "/" else "#_" if c == "#" else c for c in path)
    return modern, legacy


@cache
def _writes_modern_names() -> bool:
    """Whether the installed libdebuginfod (if any) spells source entries the 0.192 way."""
    directories = {sysconfig.get_config_var("LIBDIR") or "/usr/lib", "/usr/lib64", "/usr/lib",
                   f"/usr/lib/{sysconfig.get_config_var('MULTIARCH') or ''}"}
    for directory in directories:
        for library in Path(directory).glob("libdebuginfod-*.so"):
            match = re.search(r"-(\d+)\.(\d+)\.so$", library.name)
            if match:
                return (int(match[1]), int(match[2])) >= (0, 192)
    return True  # no elfutils here: today's spelling


# ---- progress and cancel ------------------------------------------------------------------


@dataclass(frozen=True)
class Progress:
    """One report on a transfer: what the TUI's bar and the CLI's stderr line show."""

    what: str  # e.g. "debug info of 3f2a9c…"
    url: str
    done: int  # bytes received (resumed bytes included)
    total: int | None  # None when the server did not say
    rate: float  # bytes per second over this transfer
    finished: bool = False

    @property
    def seconds_left(self) -> float | None:
        if self.total is None or self.rate <= 0:
            return None
        return max(self.total - self.done, 0) / self.rate

    @property
    def host(self) -> str:
        return urlsplit(self.url).netloc or self.url

    @property
    def numbers(self) -> str:
        """``12.3/633.4 MB, 45.6 MB/s, 0:13 left``: what a progress line shows beside the bar."""
        unit = _unit(self.total or self.done)  # done in the total's unit: 0.4/633.4 MB, not 412.0 kB/633.4 MB
        size = f"{_in(self.done, unit)}/{human_size(self.total)}" if self.total else human_size(self.done)
        words = [size, f"{human_size(self.rate)}/s"]
        left = self.seconds_left
        if left is not None and not self.finished:
            words.append(f"{int(left) // 60}:{int(left) % 60:02d} left")
        return ", ".join(words)


def _unit(count: float) -> tuple[str, float]:
    return next(((name, size) for name, size in (("GB", 1e9), ("MB", 1e6)) if count >= size), ("kB", 1e3))


def _in(count: float, unit: tuple[str, float]) -> str:
    return f"{count / unit[1]:.1f}"


def human_size(count: float) -> str:
    """``10.7 kB``, ``633.4 MB``."""
    unit = _unit(count)
    return f"{_in(count, unit)} {unit[0]}"


class Cancel(threading.Event):
    """A ``threading.Event`` that, when set, also shuts down the socket a transfer is blocked on,
    so Escape stops a stalled download at once rather than after the server's next byte."""

    def __init__(self) -> None:
        super().__init__()
        self._hooks: list[Callable[[], None]] = []
        self._hooks_lock = threading.Lock()

    def set(self) -> None:
        super().set()
        with self._hooks_lock:
            hooks = list(self._hooks)
        for hook in hooks:
            hook()

    @contextlib.contextmanager
    def hooked(self, hook: Callable[[], None]) -> Iterator[None]:
        with self._hooks_lock:
            self._hooks.append(hook)
        try:
            if self.is_set():
                hook()
            yield
        finally:
            with self._hooks_lock:
                self._hooks.remove(hook)


class Cancelled(UserError):
    """The user stopped a download; nothing of it was kept."""


class _Missing(Exception):
    """The server answered 404: it does not have this build-id's file."""


class _Failed(Exception):
    """The server could not be asked, or the transfer broke, or what it sent was refused: the reason, in words."""


class _Sockets:
    """The sockets of one transfer, shut down at once on Cancel or at a deadline (one connected later, too)."""

    def __init__(self) -> None:
        self._open: list[socket.socket] = []
        self._shut = False
        self._lock = threading.Lock()

    def add(self, sock: socket.socket) -> None:
        with self._lock:
            self._open.append(sock)
            shut = self._shut
        if shut:
            _shut_down(sock)

    def shut(self) -> None:
        with self._lock:
            self._shut = True
            sockets = list(self._open)
        for sock in sockets:
            _shut_down(sock)


def _shut_down(sock: socket.socket) -> None:
    import socket  # here: ~2.5 ms to import (-X importtime); only a cancelled transfer gets here

    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


class _Watchdog:
    """Shuts a request's sockets down when its time is up. The socket timeout bounds each wait for a byte, not
    the whole: a server sending a header byte every 2 s or a body byte a second would hold us forever."""

    def __init__(self, sockets: _Sockets) -> None:
        self.sockets = sockets
        self.expired: str | None = None  # once fired: the limit that ran out, e.g. "DEBUGINFOD_MAXTIME (2 s)"
        self._timer: threading.Timer | None = None

    def arm(self, seconds: float, variable: str, value: float) -> None:
        """Fire in ``seconds``, blaming ``variable`` set to ``value`` (re-arming replaces the previous limit)."""
        self.disarm()
        self._timer = threading.Timer(max(seconds, 0), self._fire, (f"{variable} ({value:g} s)",))
        self._timer.daemon = True
        self._timer.start()

    def _fire(self, limit: str) -> None:
        self.expired = limit
        self.sockets.shut()

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def __enter__(self) -> _Watchdog:
        return self

    def __exit__(self, *exc) -> None:
        self.disarm()


# ---- the client ---------------------------------------------------------------------------


class Client:
    """Fetches through the cache: a hit never touches the network, a miss asks each server in turn.

    ``progress`` is called from the downloading thread; ``cancel`` may be set from any thread.
    ``offline``: answer from the cache only (the function browser must not start a 600 MB download).
    """

    def __init__(self, settings: Settings | None = None, *, progress: Callable[[Progress], None] | None = None,
                 cancel: threading.Event | None = None, offline: bool = False) -> None:
        self.settings = settings or Settings.from_environment()
        self.progress = progress
        self.cancel = cancel
        self.offline = offline
        self.downloads: list[tuple[str, Path, int, float]] = []  # (url, file, bytes, seconds) fetched by this client

    @property
    def enabled(self) -> bool:
        return bool(self.settings.urls)

    def debuginfo(self, build_id: str) -> Path:
        """The debug file of a build-id (an executable's, a library's, vmlinux's or a module's)."""
        return self._fetch(build_id, ("debuginfo",), "debuginfo", f"debug info of build-id {build_id}", verify=True)

    def source(self, build_id: str, path: str) -> Path:
        """A source file of the build-id's DWARF, by the absolute path DWARF gives it."""
        if not path.startswith("/"):
            raise UserError(f"{path}: debuginfod serves source files by absolute path only",
                            "pass -s DIR with the source tree")
        modern, legacy = source_names(path)
        names = (modern, legacy) if _writes_modern_names() else (legacy, modern)
        tail = "source/" + quote(path[1:], safe="/")  # curl_easy_escape, with the slashes kept
        return self._fetch(build_id, names, tail, f"source {path}", verify=False)

    def cached(self, build_id: str) -> Path | None:
        """The build-id's debug file if the cache already holds it, checked as a download is (no network)."""
        if not BUILD_ID.match(build_id) or cache_problem(self.settings.cache):
            return None
        path = self.settings.cache / build_id / "debuginfo"
        try:
            trusted = _own_directory(path.parent) and (_regular_size(path) or 0) > 0
        except UserError:
            return None
        return path if trusted and _build_id_problem(path, build_id) is None else None

    def _fetch(self, build_id: str, names: tuple[str, ...], tail: str, what: str, verify: bool) -> Path:
        if not BUILD_ID.match(build_id):
            raise UserError(f"{build_id!r}: not a build-id", "a build-id is lowercase hex, as readelf -n prints it")
        problem = cache_problem(self.settings.cache)
        if problem:
            raise UserError(problem, _cache_hint())
        directory = self.settings.cache / build_id
        expected = build_id if verify else None
        for name in names if _own_directory(directory) else ():
            hit = self._cache_hit(directory / name, what, expected)
            if hit is not None:
                return hit
        if not self.enabled:
            raise UserError(f"no {what}: DEBUGINFOD_URLS is not set",
                            f"set DEBUGINFOD_URLS to your distribution's server, e.g. {PUBLIC_SERVERS}")
        if self.offline:
            raise UserError(f"{what} is not in the debuginfod cache {self.settings.cache} yet",
                            "it is downloaded when the source view or a probe needs it")
        answers: list[str] = []
        missing = 0
        limit = self.settings.size_limit(source=not verify)
        for base in self.settings.urls:
            url = f"{base}/buildid/{build_id}/{tail}"
            try:
                return self._download(url, directory / names[0], expected, what, limit)
            except _Missing:
                missing += 1
                answers.append(f"{url}: not found (404)")
            except _Failed as exc:
                answers.append(f"{url}: {exc}")
        if missing == len(self.settings.urls):
            _mark_missing(directory / names[0])
        raise UserError(f"no server has the {what}: {'; '.join(answers)}",
                        "check DEBUGINFOD_URLS (kprobe-tui doctor asks each server); the file may not be "
                        "published for this build")

    def _cache_hit(self, path: Path, what: str, build_id: str | None) -> Path | None:
        """The file at ``path`` if it may be used: regular (a symlink is not followed) and, for debug info, of
        ``build_id`` (another build's is removed, to be fetched anew); a UserError while elfutils' "no server has
        it" mark holds."""
        size = _regular_size(path)
        if size is None:
            return None
        if size > 0:
            if build_id is None or _build_id_problem(path, build_id) is None:
                return path
            with contextlib.suppress(OSError):
                path.unlink()
            return None
        age = time.time() - path.lstat().st_mtime
        patience = _cache_miss_seconds(self.settings.cache)
        if age <= patience:
            raise UserError(f"no server had the {what} {age:.0f} s ago, and debuginfod clients wait "
                            f"{patience:.0f} s before asking again (the empty file {path} says so)",
                            f"delete {path} to ask now")
        with contextlib.suppress(OSError):
            path.unlink()
        return None

    # ---- one transfer ----

    def _download(self, url: str, target: Path, build_id: str | None, what: str, limit: int) -> Path:
        """Fetch ``url`` into ``target`` through a locked temporary file beside it (mkstemp: O_EXCL|O_NOFOLLOW, 0600)."""
        import tempfile  # here: ~3.5 ms to import (-X importtime); only a download needs it

        try:
            self.settings.cache.mkdir(parents=True, exist_ok=True, mode=0o700)
            target.parent.mkdir(exist_ok=True, mode=0o700)
        except OSError as exc:
            raise UserError(f"cannot create the debuginfod cache {target.parent}: {exc.strerror}",
                            "set DEBUGINFOD_CACHE_PATH to a writable directory") from exc
        _own_directory(target.parent)
        _remove_abandoned(target, max(self.settings.timeout, 60))
        descriptor, temporary = tempfile.mkstemp(prefix=f"{target.name}.", dir=target.parent)
        kept = False
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)  # "being written": _remove_abandoned leaves it alone
            with os.fdopen(descriptor, "r+b", buffering=0) as out:  # unbuffered: a write error surfaces in _write
                started = time.monotonic()
                received, modified, answered = self._transfer(url, out, what, limit)
            problem = _build_id_problem(Path(temporary), build_id) if build_id is not None else None
            if problem:
                via = f"redirected to {answered}, which " if answered != url else ""
                raise _Failed(f"{via}sent {problem}: it was not kept")
            if modified is not None:
                os.utime(temporary, (modified, modified))
            os.chmod(temporary, 0o400)  # as elfutils: cache files are not to be edited (and only we read them)
            os.replace(temporary, target)
            kept = True
            self.downloads.append((answered, target, received, time.monotonic() - started))
            return target
        finally:
            if not kept:
                with contextlib.suppress(OSError):
                    os.unlink(temporary)

    def _transfer(self, url: str, out, what: str, limit: int) -> tuple[int, float | None, str]:
        """Write the body of ``url`` to ``out``: (bytes, Last-Modified, the URL that answered, after redirects).
        Resumes with Range when the server offers it, restarts otherwise, up to DEBUGINFOD_RETRY_LIMIT times;
        within DEBUGINFOD_MAXTIME in all, each answer under way within DEBUGINFOD_TIMEOUT, ``limit`` bytes at most."""
        # here: http.client ~29 ms, urllib.request ~38 ms to import (-X importtime); see the note at the top
        import http.client
        import urllib.error
        import urllib.request

        settings = self.settings
        sockets = _Sockets()
        opener = _opener(sockets)
        done, total, resumable, validator, modified = 0, None, False, None, None
        attempts = 0
        reporter = _Reporter(self.progress, what, url)
        hooked = getattr(self.cancel, "hooked", None)
        deadline = time.monotonic() + settings.maxtime
        with hooked(sockets.shut) if hooked else contextlib.nullcontext(), _Watchdog(sockets) as watchdog:
            while True:
                headers = {"User-Agent": f"kprobe-tui/{__version__}", "Accept-Encoding": "identity",
                           "X-DEBUGINFOD-MAXSIZE": str(limit)}  # as elfutils: a server may refuse (406) at once
                if done and resumable:
                    headers["Range"] = f"bytes={done}-"
                    if validator:
                        headers["If-Range"] = validator
                left = deadline - time.monotonic()
                if settings.timeout < left:
                    watchdog.arm(settings.timeout, "DEBUGINFOD_TIMEOUT", settings.timeout)
                else:
                    watchdog.arm(left, "DEBUGINFOD_MAXTIME", settings.maxtime)
                try:
                    response = opener.open(urllib.request.Request(url, headers=headers), timeout=settings.timeout)
                except urllib.error.HTTPError as exc:
                    exc.close()
                    self._check_cancel(what)
                    if exc.code == 404:
                        raise _Missing() from None
                    if exc.code == 406:
                        raise _Failed(f"larger than DEBUGINFOD_MAXSIZE ({human_size(limit)}): the server would not send it") from None
                    raise _Failed(f"HTTP {exc.code} {exc.reason}") from None
                except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
                    self._check_cancel(what)
                    if watchdog.expired:
                        raise _Failed(f"no answer within {watchdog.expired}; raise it if the server is only slow") from None
                    raise _Failed(_reason(exc)) from None
                if watchdog.expired:  # a shut socket reads as the end of the headers
                    response.close()
                    raise _Failed(f"no answer within {watchdog.expired}; raise it if the server is only slow")
                watchdog.arm(deadline - time.monotonic(), "DEBUGINFOD_MAXTIME", settings.maxtime)
                with response:
                    if not (done and response.status == 206 and _resumes_at(response, done)):
                        out.seek(0)
                        out.truncate()
                        done = 0
                    total = _total(response, done)
                    if total is not None and total > limit:
                        raise _Failed(f"announced {human_size(total)}, more than DEBUGINFOD_MAXSIZE ({human_size(limit)}): "
                                      "not downloaded; raise DEBUGINFOD_MAXSIZE to take it")
                    resumable = response.headers.get("Accept-Ranges", "").lower() == "bytes"
                    validator = response.headers.get("ETag") or response.headers.get("Last-Modified")
                    modified = _http_time(response.headers.get("Last-Modified"))
                    reporter.start(response.geturl(), done, total)
                    try:
                        while chunk := response.read1(CHUNK):  # what has arrived: progress as it comes
                            if done + len(chunk) > limit:
                                raise _Failed(f"sent more than DEBUGINFOD_MAXSIZE ({human_size(limit)}): stopped, "
                                              "nothing kept; raise DEBUGINFOD_MAXSIZE to take it")
                            self._write(out, chunk, what)
                            done += len(chunk)
                            reporter.update(done)
                            self._check_cancel(what)
                        self._check_cancel(what)
                        if watchdog.expired:  # a shut socket reads as the end of the body
                            raise TimeoutError
                        if total is not None and done != total:
                            raise http.client.IncompleteRead(b"", total - done)
                        reporter.finish(done)
                        return done, modified, response.geturl()
                    except (OSError, http.client.HTTPException) as exc:
                        self._check_cancel(what)
                        if watchdog.expired:
                            raise _Failed(f"took longer than {watchdog.expired}: {done} of "
                                          f"{total if total is not None else '?'} bytes arrived; raise it if the "
                                          "server is only slow") from None
                        attempts += 1
                        if attempts > self.settings.retries:
                            raise _Failed(f"the transfer broke off after {done} of "
                                          f"{total if total is not None else '?'} bytes ({_reason(exc)}), "
                                          f"{attempts} times") from None

    def _write(self, out, chunk: bytes, what: str) -> None:
        """Append ``chunk`` to ``out``. A failure is this machine's (a full disk, a quota, a read-only file system),
        not the server's: no retry, and no other server asked, as it would fail the same."""
        try:
            view = memoryview(chunk)
            while view:
                view = view[out.write(view) :]
        except OSError as exc:
            raise UserError(f"cannot write the {what} into the debuginfod cache {self.settings.cache}: "
                            f"{(exc.strerror or str(exc)).lower()}",
                            "free space there, or set DEBUGINFOD_CACHE_PATH to a file system with room") from None

    def _check_cancel(self, what: str) -> None:
        if self.cancel is not None and self.cancel.is_set():
            raise Cancelled(f"download of the {what} cancelled; nothing of it was kept")

    # ---- doctor ----

    def served(self, build_id: str) -> list[tuple[str, str]]:
        """(URL, answer in words) for the build-id's debug file on each server: a HEAD request (or a
        GET whose body is not read, for servers that refuse HEAD). Nothing is downloaded."""
        answers = []
        for base in self.settings.urls:
            url = f"{base}/buildid/{build_id}/debuginfo"
            answers.append((url, self._ask(url)))
        return answers

    def _ask(self, url: str) -> str:
        # here: http.client ~29 ms, urllib.request ~38 ms to import (-X importtime); see the note at the top
        import http.client
        import urllib.error
        import urllib.request

        sockets = _Sockets()
        opener = _opener(sockets)
        patience = min(self.settings.timeout, DOCTOR_DEADLINE)
        with _Watchdog(sockets) as watchdog:
            for method in ("HEAD", "GET"):
                request = urllib.request.Request(url, method=method, headers={"User-Agent": f"kprobe-tui/{__version__}"})
                watchdog.arm(patience, "DEBUGINFOD_TIMEOUT", patience)
                try:
                    with opener.open(request, timeout=patience) as response:
                        if watchdog.expired:  # a shut socket reads as the end of the headers
                            raise TimeoutError
                        size = _total(response, 0)
                        return f"served ({human_size(size)})" if size is not None else "served"
                except urllib.error.HTTPError as exc:
                    exc.close()
                    if exc.code == 404:
                        return "not served (404)"
                    if method == "HEAD" and exc.code in (400, 405, 501):
                        continue  # elfutils' own server answers HEAD with 400 before 0.189
                    return f"HTTP {exc.code} {exc.reason}"
                except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
                    if watchdog.expired:
                        return f"no answer within {watchdog.expired}"
                    return f"unreachable ({_reason(exc)})"
        return "no answer"


class _Reporter:
    """Turns bytes received into Progress reports, at most every PROGRESS_INTERVAL seconds."""

    def __init__(self, callback: Callable[[Progress], None] | None, what: str, url: str) -> None:
        self.callback, self.what, self.url = callback, what, url
        self.total: int | None = None
        self.started = self.last = time.monotonic()
        self.first = 0

    def start(self, url: str, done: int, total: int | None) -> None:
        self.url, self.total, self.first = url, total, done
        self.started = time.monotonic()
        self._send(done, force=True)

    def update(self, done: int) -> None:
        self._send(done)

    def finish(self, done: int) -> None:
        self._send(done, force=True, finished=True)

    def _send(self, done: int, force: bool = False, finished: bool = False) -> None:
        now = time.monotonic()
        if self.callback is None or (not force and now - self.last < PROGRESS_INTERVAL):
            return
        self.last = now
        elapsed = now - self.started
        rate = (done - self.first) / elapsed if elapsed > 0 else 0.0
        self.callback(Progress(self.what, self.url, done, self.total, rate, finished))


def _opener(sockets: _Sockets) -> urllib.request.OpenerDirector:
    """urllib (proxies, redirects, https) with every connected socket recorded, so Cancel and the deadlines can
    shut it; redirects only to http or https, and never from https down to http."""
    # here: http.client ~29 ms, urllib.request ~38 ms to import (-X importtime); see the note at the top
    import http.client
    import urllib.error
    import urllib.request

    class Http(http.client.HTTPConnection):
        def connect(self) -> None:
            super().connect()
            sockets.add(self.sock)

    class Https(http.client.HTTPSConnection):
        def connect(self) -> None:
            super().connect()
            sockets.add(self.sock)

    class Redirects(urllib.request.HTTPRedirectHandler):
        """urllib refuses file:// but follows ftp://, and https to http, where anyone on the path may answer."""

        def redirect_request(self, req, fp, code, msg, headers, newurl):
            old, new = urlsplit(req.full_url).scheme, urlsplit(newurl).scheme
            refused = ("from https down to http" if (old, new) == ("https", "http")
                       else f"{new}: is not http or https" if new not in ("http", "https") else None)
            if refused:
                fp.close()
                raise urllib.error.URLError(f"redirected to {newurl}, refused: {refused}")
            return super().redirect_request(req, fp, code, msg, headers, newurl)

    class HttpHandler(urllib.request.HTTPHandler):
        def http_open(self, req):
            return self.do_open(Http, req)

    class HttpsHandler(urllib.request.HTTPSHandler):
        def https_open(self, req):
            return self.do_open(Https, req, context=self._context)

    return urllib.request.build_opener(HttpHandler, HttpsHandler, Redirects)


def _reason(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None) or exc
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror.lower()
    if isinstance(reason, TimeoutError):
        return "timed out"
    return str(reason) or type(reason).__name__


def _resumes_at(response, done: int) -> bool:
    match = re.match(r"bytes (\d+)-", response.headers.get("Content-Range", ""))
    return match is not None and int(match[1]) == done


def _total(response, done: int) -> int | None:
    """The full size: from Content-Range on a resumed transfer, else Content-Length or X-DEBUGINFOD-SIZE."""
    ranged = re.match(r"bytes \d+-\d+/(\d+)", response.headers.get("Content-Range", ""))
    if ranged and response.status == 206:
        return int(ranged[1])
    for header in ("Content-Length", "X-DEBUGINFOD-SIZE"):
        value = response.headers.get(header, "")
        if value.isdigit():
            return int(value) + (done if response.status == 206 else 0)
    return None


def _http_time(value: str | None) -> float | None:
    import email.utils  # here: ~12 ms to import (-X importtime); only a server's reply needs it

    if not value:
        return None
    try:
        return email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        return None


def _build_id_problem(path: Path, build_id: str) -> str | None:
    """What is wrong with ``path`` as the debug file of ``build_id`` (a download, or a cache hit), or None."""
    try:
        found = ElfSections(path).build_id()
    except (NotElf, UserError, OSError) as exc:
        return f"something that is not an ELF file ({exc})"
    return None if found == build_id else f"a file with build-id {found}, not {build_id}"


def _cache_miss_seconds(cache: Path) -> float:
    try:
        return float((cache / "cache_miss_s").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return DEFAULT_CACHE_MISS


def _mark_missing(path: Path) -> None:
    """elfutils' negative hit: an empty file, so no debuginfod client asks again for cache_miss_s."""
    with contextlib.suppress(OSError):
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600))


def _remove_abandoned(target: Path, older_than: float) -> None:
    """Temporary files of transfers that were killed: unlocked and untouched for a while."""
    for candidate in target.parent.glob(f"{glob.escape(target.name)}.*"):
        try:
            descriptor = os.open(candidate, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if time.time() - os.fstat(descriptor).st_mtime > older_than:
                candidate.unlink()
        except OSError:
            pass  # locked: a transfer is writing it
        finally:
            os.close(descriptor)



# ---- doctor -------------------------------------------------------------------------------


def setup_report(client: Client, kernel_build_id: str | None) -> list[str]:
    """doctor's "Debug info from debuginfod" section: servers, cache, and whether each serves this kernel."""
    settings = client.settings
    lines = ["Debug info from debuginfod"]
    if settings.urls:
        lines.append(f"  [ok] {'servers (DEBUGINFOD_URLS)':<36} {' '.join(settings.urls)}")
    else:
        lines.append(f"  [--] {'servers (DEBUGINFOD_URLS)':<36} not set: no server is asked. Debug info and sources "
                     f"missing here come from your distribution's server once it is set, e.g. {PUBLIC_SERVERS}")
    problem = cache_problem(settings.cache)
    if problem:
        lines.append(f"  [--] {'cache (DEBUGINFOD_CACHE_PATH)':<36} not used: {problem}; {_cache_hint()}")
    else:
        entries, size = _cache_usage(settings.cache)
        lines.append(f"  [{'ok' if settings.cache.is_dir() else '--'}] {'cache (DEBUGINFOD_CACHE_PATH)':<36} "
                     f"{settings.cache} ({entries} build-ids, {human_size(size)}; shared with gdb, perf, debuginfod-find)")
    if kernel_build_id is None:
        return lines
    label = "this kernel's debug info"
    if client.cached(kernel_build_id) is not None:
        lines.append(f"  [ok] {label:<36} in the cache ({kernel_build_id})")
    for url, answer in client.served(kernel_build_id) if settings.urls else ():
        lines.append(f"  [{'ok' if answer.startswith('served') else '--'}] {label:<36} {answer} at {url}")
    return lines


def _cache_usage(cache: Path) -> tuple[int, int]:
    """(build-id directories, bytes) in the cache."""
    entries = size = 0
    try:
        for entry in cache.iterdir():
            if entry.is_dir() and BUILD_ID.match(entry.name):
                entries += 1
                size += sum(f.stat().st_size for f in entry.iterdir() if f.is_file())
    except OSError:
        pass
    return entries, size
