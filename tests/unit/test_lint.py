"""ruff on the package, the tests and the benchmarks, and mypy on the package, as configured in
pyproject.toml: a finding fails the suite.

Skipped only where the tool is not installed (``pip install -e '.[test]'`` installs both)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


def tool(name: str) -> str:
    """The tool beside this interpreter (the venv's), else on PATH."""
    found = Path(sys.executable).parent / name
    path = str(found) if found.exists() else shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (pip install -e '.[test]')")
    return path


def test_ruff_finds_nothing_in_the_package_tests_and_benchmarks():
    ran = subprocess.run([tool("ruff"), "check", "--no-cache", "--output-format", "concise"], cwd=ROOT,
                         capture_output=True, text=True)
    assert ran.returncode == 0, ran.stdout + ran.stderr


def test_mypy_finds_nothing_in_the_package():
    ran = subprocess.run([tool("mypy"), "--no-incremental", "--cache-dir", "/dev/null"], cwd=ROOT,
                         capture_output=True, text=True)
    assert ran.returncode == 0, ran.stdout + ran.stderr
