"""Fixtures for the debuginfo tests: C programs compiled by gcc, perf as the oracle, the debug vmlinux."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from debuginfo_helpers import C_DIR, VARIANTS
from kernel_debug import ensure_kernel_debug, skip_reason


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory, monkeypatch):
    """Each test gets its own index cache, so no test depends on a user's ~/.cache or another test."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))


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
