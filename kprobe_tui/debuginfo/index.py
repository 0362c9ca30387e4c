"""Persistent per-build-id index: function name -> compile units and DIEs that define it.

One SQLite file per build-id under $XDG_CACHE_HOME/kprobe-tui/, so a lookup reads one row
instead of loading a 100k-name table. Filled in three ways:
 - names -> CU offsets from the symbol table and .debug_aranges (a fraction of a second even
   for a vmlinux): every out-of-line function, static ones included;
 - per unit, the first time one is opened: its functions' DIE offsets and the address ranges
   of its subprograms, so the next run jumps straight to a DIE without walking the unit;
 - per name, when every unit defining it is wanted (perf looks in all of them) or it is not
   found (a function that exists only inlined): the units naming it, by a scan of the section
   bytes (namescan.py: ~0.4 s on a vmlinux, where walking every unit took minutes);
 - per question, its answer (a `lines` spec's unit, file and probeable line numbers; a `vars`
   listing): the same DWARF always gives the same answer, and a warm run that finds it here
   never imports pyelftools nor decodes a line table (a kernel unit's is most of a warm run).
   FORMAT names how answers are computed: bump it when that changes, and old answers go.

The cache is written only where no one else can steer it: root run with a user's environment
(``sudo -E`` keeps XDG_CACHE_HOME and HOME) would otherwise make a file wherever that user's symlink
points. A directory on the way that another user could change, a cache directory not this user's, or
a symlink in the index file's place, and the index is kept in memory for the run instead, quietly:
it is a cache, its absence costs speed and nothing else. Directories are made 0700, files 0600.
"""

from __future__ import annotations

import marshal
import os
import sqlite3
from collections.abc import Callable, Iterable
from pathlib import Path
from stat import S_ISREG, S_ISVTX

FORMAT = 5
SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER);
CREATE TABLE IF NOT EXISTS names (name TEXT, cu INTEGER, PRIMARY KEY (name, cu)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS units (cu INTEGER PRIMARY KEY, functions BLOB, ranges BLOB);
CREATE TABLE IF NOT EXISTS instances (cu INTEGER PRIMARY KEY, origins BLOB);
CREATE TABLE IF NOT EXISTS answers (question TEXT PRIMARY KEY, answer BLOB);
CREATE TABLE IF NOT EXISTS scanned (name TEXT PRIMARY KEY) WITHOUT ROWID;
"""


def cache_dir() -> Path:
    """$XDG_CACHE_HOME/kprobe-tui, ~/.cache/kprobe-tui when it is unset or relative (the XDG spec: ignore it)."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    return (Path(base) if os.path.isabs(base) else Path.home() / ".cache") / "kprobe-tui"


def cache_key(build_id: str | None, path: Path) -> str:
    """The build-id, or for a file without one a digest of its path, size and mtime."""
    if build_id:
        return build_id
    import hashlib  # only here: its OpenSSL backend costs every run 2.5 ms otherwise

    stat = path.stat()
    return hashlib.sha1(f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()


def file_identity(path: Path) -> str:
    """Which file an index was built from: device, inode, size and mtime.

    A build-id is only what the linker was told (``-Wl,--build-id=0x...`` forges any), so an index
    found under one is used only for the file it was built from; another file (a different program
    carrying the same build-id, or a copy of the same one) rebuilds it. A stat costs ~3 us; hashing
    the DWARF instead, which would let copies share, costs 16 ms on libpython and 0.36 s on a debug
    vmlinux (page cache warm), on every run, beside a warm `vars` of ~100 ms
    (benchmarks/bench_index_identity.py).
    """
    stat = path.stat()
    return f"{stat.st_dev}:{stat.st_ino}:{stat.st_size}:{stat.st_mtime_ns}"


def _private_file(path: Path) -> Path | None:
    """``path`` resolved, as a regular file of this user's, mode 0600 (made if missing), in a directory
    only this user (and root) can change; None when it is not one (see the module's docstring).

    The path is resolved first, then walked one directory at a time from /, each opened in the one
    before without following a symlink: sqlite opens what was checked, and a symlink on the way that
    its owner re-points later is not followed again. 0.2 ms on a path 8 deep, of a warm ``vars``'s ~100.
    """
    uid = os.geteuid()
    real = os.path.realpath(path.parent)
    parts = [part for part in real.split("/") if part]
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open("/", flags)
    except OSError:
        return None
    try:
        for depth, part in enumerate(parts, 1):
            try:
                inner = os.open(part, flags, dir_fd=fd)
            except FileNotFoundError:
                os.mkdir(part, 0o700, dir_fd=fd)
                inner = os.open(part, flags, dir_fd=fd)
            os.close(fd)
            fd = inner
            if not _safe_dir(fd, uid, last=depth == len(parts)):
                return None
        return Path(real, path.name) if _private_in(fd, path.name, uid) else None
    except OSError:
        return None  # re-pointed since it was resolved, not a directory, or not ours to make
    finally:
        os.close(fd)


def _safe_dir(fd: int, uid: int, last: bool) -> bool:
    """Whether no other user can replace this directory or what is in it: root's or ours, not writable
    by others unless sticky (no one else can rename ours out of a sticky /tmp); the cache directory
    itself ours, and 0700."""
    status = os.fstat(fd)
    if not last:
        return status.st_uid in (0, uid) and not (status.st_mode & 0o022 and not status.st_mode & S_ISVTX)
    if status.st_uid != uid:
        return False
    if status.st_mode & 0o077:
        os.fchmod(fd, 0o700)  # an earlier kprobe-tui made it 0755
    return True


def _private_in(directory_fd: int, name: str, uid: int) -> bool:
    """Whether ``name`` in the directory is (or is made) a regular file of ours, mode 0600; a symlink is not."""
    fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600,
                 dir_fd=directory_fd)
    try:
        status = os.fstat(fd)
        if not S_ISREG(status.st_mode) or status.st_uid != uid:
            return False
        if status.st_mode & 0o077:
            os.fchmod(fd, 0o600)  # an earlier kprobe-tui left it 0644
        return True
    finally:
        os.close(fd)


class NameIndex:
    """Lookups and additions on one build-id's index; without a writable cache, kept in memory.

    The TUI opens debug info in one worker thread and asks about variables in another, one at a
    time; the connection is shared between them (check_same_thread=False), never used at once.
    """

    def __init__(self, path: Path, db: sqlite3.Connection) -> None:
        self.path = path
        self.db = db
        self._units: dict[int, tuple[dict[str, list[int]], list[tuple[int, int, int]]]] = {}

    @classmethod
    def load_or_build(cls, key: str, from_symbols: Callable[[], Iterable[tuple[str, int]]],
                      identity: str = "") -> NameIndex:
        """Open the saved index, or build it from (name, CU offset) pairs and save it; a saved index of
        another file (``identity``, see file_identity) is rebuilt, never trusted."""
        path = cache_dir() / f"{key}.index.sqlite"
        db = _connect(path)
        index = cls(path, db)
        if index._meta("format") != FORMAT or index._meta("identity") != identity:
            pairs = list(from_symbols())
            try:
                _fill(db, pairs, identity)
            except sqlite3.Error:
                index.db = sqlite3.connect(":memory:", check_same_thread=False)
                index.db.executescript(SCHEMA)
                _fill(index.db, pairs, identity)
        return index

    def _meta(self, key: str) -> int | None:
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None


    def cus(self, name: str) -> list[int]:
        return [row[0] for row in self.db.execute("SELECT cu FROM names WHERE name = ? ORDER BY cu", (name,))]

    def scanned(self, name: str) -> bool:
        """Whether every unit naming ``name`` is in the index (``add_scanned``)."""
        return self.db.execute("SELECT 1 FROM scanned WHERE name = ?", (name,)).fetchone() is not None

    def add_scanned(self, name: str, cu_offsets: Iterable[int]) -> None:
        """Record the units that may define ``name`` (a byte scan may name a unit that does not: harmless)."""
        rows = [(name, cu) for cu in cu_offsets]
        try:
            with self.db:
                self.db.executemany("INSERT OR IGNORE INTO names VALUES (?, ?)", rows)
                self.db.execute("INSERT OR IGNORE INTO scanned VALUES (?)", (name,))
        except sqlite3.Error:
            self.db = _in_memory_copy(self.db)
            with self.db:
                self.db.executemany("INSERT OR IGNORE INTO names VALUES (?, ?)", rows)
                self.db.execute("INSERT OR IGNORE INTO scanned VALUES (?)", (name,))

    def knows_functions_of(self, cu_offset: int) -> bool:
        return self._unit(cu_offset) is not None

    def add_functions(self, cu_offset: int, functions: Iterable[tuple[str, int]],
                      ranges: list[tuple[int, int, int]]) -> None:
        """Remember where each function of a walked unit is, so the next run jumps straight to it.

        ``ranges`` are (low, high, DIE offset) of every subprogram, in DIE order: what perf's
        die_find_realfunc searches, without parsing the unit's thousands of top-level DIEs again.
        """
        by_name: dict[str, list[int]] = {}
        for name, die_offset in functions:
            by_name.setdefault(name, []).append(die_offset)
        self._units[cu_offset] = (by_name, ranges)
        try:
            with self.db:
                self.db.execute("INSERT OR REPLACE INTO units VALUES (?, ?, ?)",
                                (cu_offset, marshal.dumps(by_name), marshal.dumps(ranges)))
        except sqlite3.Error:
            pass  # a read-only cache only costs speed on the next run

    def _unit(self, cu_offset: int):
        if cu_offset not in self._units:
            row = self.db.execute("SELECT functions, ranges FROM units WHERE cu = ?", (cu_offset,)).fetchone()
            if row is None:
                return None
            self._units[cu_offset] = (marshal.loads(row[0]), marshal.loads(row[1]))
        return self._units[cu_offset]

    def instances(self, cu_offset: int) -> dict[int, list[int]] | None:
        """origin DIE offset -> concrete copies' DIE offsets of a unit, if recorded."""
        row = self.db.execute("SELECT origins FROM instances WHERE cu = ?", (cu_offset,)).fetchone()
        return marshal.loads(row[0]) if row else None

    def add_instances(self, cu_offset: int, origins: dict[int, list[int]]) -> None:
        try:
            with self.db:
                self.db.execute("INSERT OR REPLACE INTO instances VALUES (?, ?)", (cu_offset, marshal.dumps(origins)))
        except sqlite3.Error:
            pass  # a read-only cache only costs speed on the next run

    def answer(self, question: str):
        """The answer saved for this exact question (marshal-able data), or None."""
        row = self.db.execute("SELECT answer FROM answers WHERE question = ?", (question,)).fetchone()
        return marshal.loads(row[0]) if row else None

    def save_answer(self, question: str, answer) -> None:
        try:
            with self.db:
                self.db.execute("INSERT OR REPLACE INTO answers VALUES (?, ?)", (question, marshal.dumps(answer)))
        except sqlite3.Error:
            pass  # a read-only cache only costs speed on the next run

    def function_dies(self, cu_offset: int, name: str) -> list[int]:
        unit = self._unit(cu_offset)
        return unit[0].get(name, []) if unit else []

    def function_ranges(self, cu_offset: int) -> list[tuple[int, int, int]]:
        unit = self._unit(cu_offset)
        return unit[1] if unit else []


def _connect(path: Path) -> sqlite3.Connection:
    """The index file, or a database in memory when it is not safe to use or cannot be opened."""
    private = _private_file(path)
    if private is not None:
        try:
            db = sqlite3.connect(private, timeout=30, check_same_thread=False)
            # A cache: no fsync per commit (5 ms each, a tenth of a cold run on a library). A power
            # cut may lose or spoil the file; a spoiled one fails here and we carry on in memory.
            db.execute("PRAGMA synchronous = OFF")
            db.executescript(SCHEMA)
            return db
        except (OSError, sqlite3.Error):
            pass
    db = sqlite3.connect(":memory:", check_same_thread=False)
    db.executescript(SCHEMA)
    return db


def _fill(db: sqlite3.Connection, pairs: list[tuple[str, int]], identity: str) -> None:
    with db:
        db.execute("DELETE FROM names")
        db.execute("DELETE FROM units")
        db.execute("DELETE FROM instances")
        db.execute("DELETE FROM answers")
        db.execute("DELETE FROM scanned")
        db.executemany("INSERT OR IGNORE INTO names VALUES (?, ?)", pairs)
        db.execute("INSERT OR REPLACE INTO meta VALUES ('format', ?)", (FORMAT,))
        db.execute("INSERT OR REPLACE INTO meta VALUES ('identity', ?)", (identity,))


def _in_memory_copy(db: sqlite3.Connection) -> sqlite3.Connection:
    """Carry on in memory when the cache file turns out not to be writable."""
    memory = sqlite3.connect(":memory:", check_same_thread=False)
    db.backup(memory)
    return memory
