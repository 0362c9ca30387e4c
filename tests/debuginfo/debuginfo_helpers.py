"""Helpers shared by the debuginfo tests (conftest.py holds the fixtures; a module named
conftest cannot be imported reliably when several test directories have one)."""

from __future__ import annotations

import subprocess
from pathlib import Path

C_DIR = Path(__file__).parent / "c"
VARIANTS = [("O0", 4), ("O0", 5), ("O2", 4), ("O2", 5)]
# What the perf comparisons ask of c/probed.c: every function, ranges, files, lines, returns.
FUNCTIONS = ["main", "count_ready", "total_area", "describe", "largest_area", "remember"]
LINE_SPECS = FUNCTIONS + ["count_ready:5-9", "total_area:2+4", "main@probed.c:7-12", "probed.c:30-45"]
VAR_SPECS = FUNCTIONS + [
    "shape_area", "total_area%return", "describe%return", "count_ready:8", "count_ready:9", "total_area:7",
    "total_area:10", "describe:9", "main:7", "main:18", "largest_area:2", "largest_area:5",
]


def perf_probe(*args: str) -> subprocess.CompletedProcess:
    """perf probe's output: the oracle (its stdout only; it prints errors on stderr)."""
    return subprocess.run(["perf", "probe", *args], capture_output=True, text=True,
                          errors="surrogateescape", timeout=120)
