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
"""

from __future__ import annotations

import marshal
import os
import sqlite3
from collections.abc import Callable, Iterable
from pathlib import Path

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
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kprobe-tui"


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
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(path, timeout=30, check_same_thread=False)
            # A cache: no fsync per commit (5 ms each, a tenth of a cold run on a library). A power
            # cut may lose or spoil the file; a spoiled one fails here and we carry on in memory.
            db.execute("PRAGMA synchronous = OFF")
            db.executescript(SCHEMA)
        except (OSError, sqlite3.Error):
            db = sqlite3.connect(":memory:", check_same_thread=False)
            db.executescript(SCHEMA)
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
