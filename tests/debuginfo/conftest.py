"""Fixtures for the debuginfo tests: C programs compiled by gcc, perf as the oracle, the debug vmlinux."""

from __future__ import annotations

import shutil
import subprocess
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import pytest
from debuginfo_helpers import C_DIR, FUNCTIONS, LINE_SPECS, VAR_SPECS, VARIANTS, perf_probe
from kernel_debug import ensure_kernel_debug, ensure_module_debug, module_debug_files, skip_reason
from separate_builds import Builds, build_all

from kprobe_tui.debuginfo import scope


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory, monkeypatch):
    """Each test gets its own index cache, so no test depends on a user's ~/.cache or another test; and
    its own shared DebugInfos, so every test reads its files afresh."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
    monkeypatch.setattr(scope, "_shared", OrderedDict())


@pytest.fixture(scope="session")
def programs(tmp_path_factory) -> dict[tuple[str, int], Path]:
    """tests/debuginfo/c/probed.c built at -O0/-O2 with DWARF 4 and 5."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    out = tmp_path_factory.mktemp("programs")
    built = {}
    for opt, version in VARIANTS:
        binary = out / f"probed-{opt}-dwarf{version}"
        subprocess.run(["gcc", f"-{opt}", f"-gdwarf-{version}", "-I", str(C_DIR), "-o", str(binary),
                        str(C_DIR / "probed.c")], check=True)
        built[(opt, version)] = binary
    return built


@pytest.fixture(scope="session")
def perf() -> None:
    if shutil.which("perf") is None:
        pytest.skip("perf is not installed (.ci/run installs linux-perf)")


@pytest.fixture(scope="session")
def kernel_debug():
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    return ensure_kernel_debug()


@dataclass(frozen=True)
class ModuleDebug:
    """Debian's debug files of two modules, in a tree laid out as /usr/lib/debug."""

    root: Path
    release: str
    ninep: Path  # fs/9p/9p.ko
    virtio: Path  # drivers/virtio/virtio.ko: its device_show shares the name with vmlinux's


@pytest.fixture(scope="session")
def module_debug(kernel_debug) -> ModuleDebug:
    root = ensure_module_debug()
    ninep, virtio = module_debug_files(kernel_debug.release)
    return ModuleDebug(root, kernel_debug.release, ninep, virtio)


@pytest.fixture(scope="session")
def builds(tmp_path_factory) -> Builds:
    """c/probed.c stripped to a debuglink, processed by dwz, compressed (separate_builds.py)."""
    missing = [tool for tool in ("gcc", "objcopy", "dwz") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (.ci/run installs gcc, binutils and dwz)")
    return build_all(tmp_path_factory.mktemp("separate"))


@dataclass
class Expected:
    lines: dict[str, str]
    vars: dict[str, str | None]  # None: perf refused the spec


@pytest.fixture(scope="session")
def expected(builds, perf) -> Expected:
    """perf probe -L/-V on the unstripped build: what every separate-debug variant must list too."""
    lines = {}
    for spec in LINE_SPECS:
        result = perf_probe("-x", str(builds.full), "-L", spec)
        if result.returncode == 0:
            lines[spec] = result.stdout
    found = {}
    for spec in VAR_SPECS:
        result = perf_probe("-x", str(builds.full), "-V", spec)
        found[spec] = result.stdout if result.returncode == 0 else None
    assert len(lines) >= len(FUNCTIONS) and sum(v is not None for v in found.values()) >= 10
    return Expected(lines, found)
