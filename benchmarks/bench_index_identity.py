"""What checking a debug index's file identity costs, beside what hashing the DWARF would cost.

The per-build-id index (debuginfo/index.py) is used only for the file it was built from. Its identity
is a stat (device, inode, size, mtime); the alternative, a digest of the .debug_* sections, would let
copies share an index. Both are timed here on the same files, with a warm `kprobe-tui vars` as the
reference a run pays anyway. Usage: python benchmarks/bench_index_identity.py [FILE ...]
(default: a program compiled here, libpython if pyenv has one, the cached Debian debug vmlinux).
"""

from __future__ import annotations

import hashlib
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

from kprobe_tui.debuginfo.index import file_identity
from kprobe_tui.debuginfo.locate import ElfSections

PROBED = Path(__file__).parents[1] / "tests" / "debuginfo" / "c" / "probed.c"
CANDIDATES = [Path.home() / ".pyenv/versions/3.11.7/lib/libpython3.11.so.1.0",
              Path("/var/cache/kprobe-tui/vmlinux-6.1.0-57-amd64")]


def timed(function, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def dwarf_digest(path: Path) -> str:
    elf = ElfSections(path)
    digest = hashlib.sha1()
    for name in sorted(n for n in elf.sections if n.startswith(".debug_")):
        digest.update(elf.data(name) or b"")
    return digest.hexdigest()


def show(seconds: float) -> str:
    return f"{seconds * 1e6:10.1f} us" if seconds < 1e-3 else f"{seconds * 1e3:10.1f} ms"


def main() -> None:
    work = Path(tempfile.mkdtemp())
    program = work / "probed"
    subprocess.run(["gcc", "-O2", "-g", "-I", str(PROBED.parent), "-o", str(program), str(PROBED)], check=True)
    files = [Path(p) for p in sys.argv[1:]] or [program, *(p for p in CANDIDATES if p.exists())]
    warm_vars = [sys.executable, "-m", "kprobe_tui", "vars", "-x", str(program), "count_ready"]
    subprocess.run(warm_vars, capture_output=True, check=True)
    reference = timed(lambda: subprocess.run(warm_vars, capture_output=True, check=True), 5)
    print(f"reference: a warm `kprobe-tui vars -x probed count_ready` {show(reference)}")
    print(f"{'file':48} {'size':>9} {'stat identity':>14} {'sha1 of .debug_*':>17}")
    for path in files:
        stat_cost = timed(partial(file_identity, path), 2000)
        hash_cost = timed(partial(dwarf_digest, path), 3 if path.stat().st_size > 100 << 20 else 20)
        print(f"{str(path)[-48:]:48} {path.stat().st_size >> 20:7} MB {show(stat_cost):>14} {show(hash_cost):>17}")


if __name__ == "__main__":
    main()
