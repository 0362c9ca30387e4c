"""Corrupt inputs end in a clear error naming the file (exit 2) or in an answer (exit 0), never in a
traceback or an "internal error" (exit 70): DWARF, ELF headers and symbol tables, BTF and snapshot
archives, each with random bytes changed. Seeded: a failure names the copy that caused it."""

from __future__ import annotations

import contextlib
import gzip
import io
import random
import signal
import struct
import tarfile
from pathlib import Path

import pytest

from kprobe_tui.cli import main
from kprobe_tui.debuginfo.locate import ElfSections
from kprobe_tui.errors import UserError
from kprobe_tui.kernel.btf import Btf
from kprobe_tui.probes.binary import BinaryCatalog

SEED = 15
COPIES = 30
SNAPSHOT_61 = Path(__file__).parents[1] / "fixtures" / "snapshots" / "debian-6.1.tar.gz"


@pytest.fixture(scope="module")
def probed(programs) -> Path:
    return programs[("O2", 5)]  # location lists, inlined copies, DWARF 5 forms: the most to go wrong


def flipped(data: bytes, regions: list[tuple[int, int]], rng: random.Random, most: int) -> bytes:
    copy = bytearray(data)
    for _ in range(rng.randint(1, most)):
        offset, size = rng.choice(regions)
        copy[offset + rng.randrange(size)] = rng.randrange(256)
    return bytes(copy)


class Deadline(Exception):
    pass


def cli(*args: str) -> tuple[object, str]:
    """The CLI in this process (a child per run would be ~10x slower): its exit status and stderr."""
    def expired(signum, frame):
        raise Deadline

    out, err = io.StringIO(), io.StringIO()
    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(30)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(args))
    except Deadline:
        code = "hung"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return code, err.getvalue()


def check(runs: list[tuple[str, tuple[str, ...], Path]]) -> tuple[int, int]:
    """Every run answered (0) or failed clearly (2, or perf's statuses for probe, naming the file); returns
    (answered, refused)."""
    bad, counts = [], {0: 0, 2: 0}
    for name, args, path in runs:
        code, err = cli(*args)
        refused = (234, 254) if args[0] == "probe" else (2,)  # kprobe-tui probe exits as perf probe: -EINVAL, -ENOENT
        clear = code in refused and str(path) in err and "internal error" not in err and "Traceback" not in err
        if code != 0 and not clear:
            bad.append(f"{name}: {' '.join(args)} -> {code}: {err.strip()[:300]}")
        counts[code if code in counts else 2] += 1
    assert bad == []
    return counts[0], counts[2]


def test_corrupt_dwarf(probed, tmp_path):
    elf = ElfSections(probed)
    regions = [(s.offset, s.size) for n, s in elf.sections.items() if n.startswith(".debug_") and s.size]
    data, rng = probed.read_bytes(), random.Random(SEED)
    runs = []
    for index in range(COPIES):
        path = tmp_path / f"dwarf{index}"
        path.write_bytes(flipped(data, regions, rng, 20))
        runs += [(path.name, ("lines", "-x", str(path), "count_ready"), path),
                 (path.name, ("vars", "-x", str(path), "count_ready:8"), path),
                 (path.name, ("probe", "-n", "-x", str(path), "total_area", "$params"), path)]
    answered, refused = check(runs)
    assert refused >= 20, "the corruption hardly ever showed: the test proved little"


def test_corrupt_elf_headers_and_symbol_tables(probed, tmp_path):
    data = probed.read_bytes()
    elf = ElfSections(probed)
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    (count,) = struct.unpack_from("<H", data, 0x3C)
    regions = [(0, 64), (shoff, 64 * count)] + [(s.offset, s.size) for n, s in elf.sections.items()
                                                 if n in (".symtab", ".strtab", ".dynsym", ".dynstr", ".shstrtab")]
    rng = random.Random(SEED)
    runs = []
    for index in range(COPIES):
        path = tmp_path / f"elf{index}"
        path.write_bytes(flipped(data, regions, rng, 6))
        runs += [(path.name, ("lines", "-x", str(path), "count_ready"), path),
                 (path.name, ("probe", "-n", "-x", str(path), "total_area", "$params"), path),
                 (path.name, ("probe", "-n", "-x", str(path), "total_area", "$arg1"), path)]
        try:  # the TUI's browser: a UserError (shown before the app starts) or a catalog
            catalog = BinaryCatalog(path)
            catalog.warm()
            [catalog.function(name) for name in catalog.names]
        except UserError:
            pass
    answered, refused = check(runs)
    assert refused >= 15, "the corruption hardly ever showed: the test proved little"


@pytest.fixture(scope="module")
def real_btf() -> bytes:
    with tarfile.open(SNAPSHOT_61) as archive:
        return archive.extractfile("btf/vmlinux").read()


def test_corrupt_btf(real_btf, tmp_path):
    """Our BTF reader on a real kernel's BTF with a few bytes changed: a BtfError or answers."""
    rng = random.Random(SEED)
    refused = 0
    for index in range(COPIES):
        data = flipped(real_btf, [(0, 24)] if index % 5 == 0 else [(0, len(real_btf))], rng, 3)
        try:
            btf = Btf(data, f"copy {index}")
            for name in ("vfs_read", "tcp_sendmsg", "do_sys_openat2", "kfree"):
                if not btf.has_function(name):
                    continue
                btf.prototype(name)
                for param in btf.params(name):
                    target = btf.resolve(param.type_id)
                    if btf.is_pointer(target):
                        target = btf.resolve(btf.pointee(target))
                    for member in btf.members(target)[:20]:
                        btf.type_name(member.type_id)
        except UserError:
            refused += 1
    assert refused >= 3
    # and through the CLI, where --btf names the file
    path = tmp_path / "vmlinux"
    for _ in range(5):
        path.write_bytes(flipped(real_btf, [(0, 24)], rng, 3))
        code, err = cli("--btf", str(path), "--kallsyms", str(path), "funcs", "--json", "vfs_read")
        assert code in (0, 2) and "internal error" not in err, err


def test_corrupt_snapshot_archives(tmp_path):
    """Changed bytes in the compressed archive (the gzip CRC catches most) and in the tar inside it
    (headers and member contents: BTF, kallsyms, the manifest)."""
    packed = SNAPSHOT_61.read_bytes()
    tar = gzip.decompress(packed)
    rng = random.Random(SEED)
    runs = []
    for index in range(COPIES):
        path = tmp_path / f"snapshot{index}.tar.gz"
        if index % 3 == 0:
            path.write_bytes(flipped(packed, [(0, len(packed))], rng, 4))
        else:
            path.write_bytes(gzip.compress(flipped(tar, [(0, len(tar))] if index % 3 == 1 else [(0, 4096)], rng, 8),
                                           compresslevel=1))
        runs.append((path.name, ("--snapshot", str(path), "funcs", "--all", "vfs_read"), path))
    check(runs)
