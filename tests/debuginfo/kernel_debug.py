"""Debian's debug vmlinux and kernel source, fetched once and cached for the `vmlinux` tests.

The debug package is ~860 MB, so it is downloaded with apt once into CACHE_DIR (which CI keeps
between runs) and only the vmlinux, the debug files of the modules the tests probe (laid out
as /usr/lib/debug lays them out, under CACHE_DIR/module-debug) and the unpacked source tree are
kept. The image and the source are taken at the same Debian version, so `perf probe -s SRC` and
we read the same text; the guests boot the same version, so its modules' build-ids match.
Run as a script to fetch ahead of the tests: ``python tests/debuginfo/kernel_debug.py``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

CACHE_DIR = Path(os.environ.get("KPROBE_TUI_KERNEL_CACHE", "/var/cache/kprobe-tui"))
SKIP_ENV = "KPROBE_TUI_SKIP_VMLINUX"
SOURCE_PACKAGE = "linux-source-6.1"
# Modules whose debug files are kept: loaded in every guest (the harness mounts its root over 9p,
# on virtio), so the guest tests probe them without loading anything. virtio has a device_show,
# as vmlinux does (drivers/pci): a name the two must be told apart by.
MODULES = ("kernel/fs/9p/9p.ko", "kernel/drivers/virtio/virtio.ko")


@dataclass(frozen=True)
class KernelDebug:
    """A debug vmlinux and the source tree it was built from."""

    vmlinux: Path
    source: Path
    release: str  # e.g. 6.1.0-50-amd64


def skip_reason() -> str | None:
    """Why the vmlinux tests cannot run here, or None."""
    if os.environ.get(SKIP_ENV) == "1":
        return f"{SKIP_ENV}=1: skipping the tests that need Debian's 633 MB debug vmlinux"
    if shutil.which("apt-get") is None and not any(CACHE_DIR.glob("vmlinux-*")):
        return f"no apt-get to download the debug vmlinux and nothing cached in {CACHE_DIR}"
    return None


def _apt(*argv: str, cwd: Path | None = None) -> str:
    result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {result.stderr.strip()}")
    return result.stdout


def _candidate_version(package: str) -> str:
    match = re.search(r"Candidate:\s*(\S+)", _apt("apt-cache", "policy", package))
    if not match or match.group(1) == "(none)":
        raise RuntimeError(f"apt knows no candidate for {package}: run apt-get update")
    return match.group(1)


def _dbg_package_for(version: str) -> str:
    """The linux-image-6.1.0-N-amd64-dbg package built from the same Debian version as the source."""
    names = re.findall(r"^(linux-image-6\.1\.0-\d+-amd64-dbg) ", _apt("apt-cache", "search", "linux-image-6.1.0"), re.MULTILINE)
    for name in sorted(set(names), key=lambda n: int(n.split("-")[3]), reverse=True):
        if _candidate_version(name) == version:
            return name
    raise RuntimeError(f"no linux-image-6.1.0-*-amd64-dbg at version {version} (the {SOURCE_PACKAGE} version)")


def _download(package: str) -> Path:
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    _apt("apt-get", "download", "-q", package, cwd=CACHE_DIR)
    return next(CACHE_DIR.glob(f"{package}_*.deb"))


def _extract_member(deb: Path, member_suffix: str, target: Path) -> None:
    """Copy the one file of ``deb`` whose path ends with member_suffix to target (atomically)."""
    _extract_members(deb, {member_suffix: target})


def _extract_members(deb: Path, wanted: dict[str, Path]) -> None:
    """Copy each file of ``deb`` whose path ends with a key of ``wanted`` to its target (atomically), in one pass."""
    left = dict(wanted)
    with subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE) as proc:
        with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
            for entry in tar:
                suffix = next((s for s in left if entry.name.endswith(s)), None)
                if suffix is None or not entry.isfile():
                    continue
                target = left.pop(suffix)
                target.parent.mkdir(parents=True, exist_ok=True)
                partial = target.parent / f"{target.name}.partial"
                with tar.extractfile(entry) as src, open(partial, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
                partial.rename(target)
                if not left:
                    break
        proc.stdout.read()
    if left:
        raise RuntimeError(f"{deb.name} has no {', '.join(left)}")


def ensure_kernel_debug() -> KernelDebug:
    """The cached vmlinux and source tree, downloading and unpacking them on first use."""
    cached = sorted(CACHE_DIR.glob("vmlinux-6.1.0-*-amd64"))
    source = CACHE_DIR / "linux-source-6.1"
    if cached and (source / "Makefile").exists():
        vmlinux = cached[-1]
        return KernelDebug(vmlinux, source, vmlinux.name.removeprefix("vmlinux-"))
    version = _candidate_version(SOURCE_PACKAGE)
    dbg = _dbg_package_for(version)
    release = dbg.removeprefix("linux-image-").removesuffix("-dbg")
    vmlinux = CACHE_DIR / f"vmlinux-{release}"
    if not vmlinux.exists():
        deb = _download(dbg)
        _extract_member(deb, f"/boot/vmlinux-{release}", vmlinux)
        deb.unlink()
    if not (source / "Makefile").exists():
        deb = _download(SOURCE_PACKAGE)
        tarball = CACHE_DIR / "linux-source-6.1.tar.xz"
        _extract_member(deb, "/linux-source-6.1.tar.xz", tarball)
        deb.unlink()
        partial = CACHE_DIR / "linux-source-6.1.partial"
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir()
        subprocess.run(["tar", "-xJf", str(tarball), "-C", str(partial), "--strip-components=1"], check=True)
        partial.rename(source)
        tarball.unlink()
    return KernelDebug(vmlinux, source, release)


def module_debug_root() -> Path:
    """Where the kept module debug files are: a tree laid out as /usr/lib/debug."""
    return CACHE_DIR / "module-debug"


def module_debug_files(release: str) -> list[Path]:
    return [module_debug_root() / "lib" / "modules" / release / module for module in MODULES]


def ensure_module_debug() -> Path:
    """The debug tree holding MODULES' debug files, extracted from the -dbg package on first use."""
    kernel = ensure_kernel_debug()
    files = module_debug_files(kernel.release)
    if all(path.exists() for path in files):
        return module_debug_root()
    package = f"linux-image-{kernel.release}-dbg"
    cached = sorted(CACHE_DIR.glob(f"{package}_*.deb"))  # left by an interrupted run: no second 860 MB download
    deb = cached[-1] if cached else _download(package)
    _extract_members(deb, {f"/usr/lib/debug/lib/modules/{kernel.release}/{module}": path
                           for module, path in zip(MODULES, files)})
    deb.unlink()
    return module_debug_root()


if __name__ == "__main__":
    print(ensure_kernel_debug())
    print(ensure_module_debug())
    sys.exit(0)
