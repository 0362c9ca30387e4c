"""tests/debuginfo/c/probed.c built the ways distributions ship debug info.

Every variant comes from the same compile as ``full`` (same flags, same directory), so perf on
``full`` is the reference for all of them:

- ``debuglink``: stripped of its DWARF (``objcopy --only-keep-debug``, ``--strip-debug``,
  ``--add-gnu-debuglink``), the debug file beside it;
- ``dwz``: processed by ``dwz -m``, with a second program, so its types and strings live in a
  shared supplementary file it refers to (DW_FORM_GNU_ref_alt / strp_alt), as Debian's and
  Fedora's debug packages are;
- ``zlib``: ``gcc -gz=zlib``; ``zstd``: ``objcopy --compress-debug-sections=zstd`` (None when
  binutils cannot);
- ``mapped``: compiled with ``-fdebug-prefix-map`` so that DWARF names sources under
  /usr/src/debug/, which does not exist here: only a debuginfod server can give their text.
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

from debuginfo_helpers import C_DIR

FLAGS = ["-O2", "-g"]


@dataclass(frozen=True)
class Builds:
    root: Path
    full: Path
    debuglink: Path
    dwz: Path
    dwz_alt: Path
    zlib: Path
    zstd: Path | None
    mapped: Path  # unstripped; its sources are named under mapped_prefix
    mapped_prefix: str


def run(*argv: str | Path, cwd: Path | None = None) -> None:
    subprocess.run([str(a) for a in argv], cwd=cwd, check=True, capture_output=True)


def build_id(path: Path) -> str:
    from kprobe_tui.debuginfo.locate import ElfSections

    return ElfSections(path).build_id()


def strip_to_debuglink(binary: Path, debug: Path, stripped: Path) -> None:
    """What dh_strip and find-debuginfo do: the DWARF to ``debug``, a .gnu_debuglink (with its CRC) left in ``stripped``."""
    run("objcopy", "--only-keep-debug", binary, debug)
    run("objcopy", "--strip-debug", f"--add-gnu-debuglink={debug}", binary, stripped, cwd=debug.parent)


def build_all(root: Path) -> Builds:
    source = root / "src"
    shutil.copytree(C_DIR, source)
    compile_ = ["gcc", *FLAGS, "-I", "src", "src/probed.c"]

    full = root / "full" / "prog"
    full.parent.mkdir()
    run(*compile_, "-o", full, cwd=root)

    (root / "debuglink").mkdir()
    debuglink = root / "debuglink" / "prog"
    strip_to_debuglink(full, root / "debuglink" / "prog.debug", debuglink)

    (root / "dwz").mkdir()
    dwz, other, alt = root / "dwz" / "prog", root / "dwz" / "other", root / "dwz" / "common.dwz"
    shutil.copy(full, dwz)
    run("gcc", "-O0", "-g", "-I", "src", "src/probed.c", "-o", other, cwd=root)
    run("dwz", "-m", alt, "-M", alt, dwz, other)

    (root / "zlib").mkdir()
    zlib = root / "zlib" / "prog"
    run(*compile_, "-gz=zlib", "-o", zlib, cwd=root)

    (root / "zstd").mkdir()
    zstd: Path | None = root / "zstd" / "prog"
    if subprocess.run(["objcopy", "--compress-debug-sections=zstd", str(full), str(zstd)], capture_output=True).returncode:
        zstd = None

    prefix = f"/usr/src/debug/kptui-test-{uuid.uuid4().hex[:12]}"
    (root / "mapped").mkdir()
    mapped = root / "mapped" / "prog"
    run("gcc", *FLAGS, f"-fdebug-prefix-map={root}={prefix}", "-I", source, source / "probed.c", "-o", mapped, cwd=root)
    return Builds(root, full, debuglink, dwz, alt, zlib, zstd, mapped, prefix)
