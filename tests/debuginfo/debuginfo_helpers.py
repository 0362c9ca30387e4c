"""Helpers shared by the debuginfo tests (conftest.py holds the fixtures; a module named
conftest cannot be imported reliably when several test directories have one)."""

from __future__ import annotations

import subprocess
from pathlib import Path

C_DIR = Path(__file__).parent / "c"
VARIANTS = [("O0", 4), ("O0", 5), ("O2", 4), ("O2", 5)]


def perf_probe(*args: str) -> subprocess.CompletedProcess:
    """perf probe's output: the oracle (its stdout only; it prints errors on stderr)."""
    return subprocess.run(["perf", "probe", *args], capture_output=True, text=True,
                          errors="surrogateescape", timeout=120)
