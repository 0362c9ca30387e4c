"""The per-build-id index is used only for the file it was built from: a different program carrying the
same build-id (the linker writes whatever -Wl,--build-id=0x... says) must not poison it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

FORGED = "-Wl,--build-id=0x0123456789abcdef0123456789abcdef01234567"
FIRST = """
#include <stdio.h>
__attribute__((noinline)) int alpha(int a) { int twice = a * 2; return twice + 1; }
__attribute__((noinline)) int beta(int b) { return alpha(b) - 1; }
int main(int argc, char **argv) { printf("%d\\n", beta(argc)); return 0; }
"""
# Other names first, so every function of FIRST sits at another DIE offset and address here.
SECOND = """
#include <stdio.h>
struct pair { long left, right; };
__attribute__((noinline)) long gamma_(struct pair *p, long scale) { long sum = p->left + p->right; return sum * scale; }
__attribute__((noinline)) int beta(int b, int extra) { return b + extra; }
__attribute__((noinline)) int alpha(int a) { return a; }
int main(int argc, char **argv) { struct pair p = {argc, 2}; printf("%ld %d\\n", gamma_(&p, 3), beta(argc, alpha(1))); return 0; }
"""


def build(directory: Path, name: str, source: str) -> Path:
    (directory / f"{name}.c").write_text(source)
    binary = directory / name
    subprocess.run(["gcc", "-O0", "-g", FORGED, "-o", str(binary), str(directory / f"{name}.c")], check=True)
    return binary


def build_id(binary: Path) -> str:
    return subprocess.run(["readelf", "-n", str(binary)], capture_output=True, text=True).stdout.split("Build ID: ")[1].split()[0]


def cli(cache: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kprobe_tui", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "XDG_CACHE_HOME": str(cache)})


def test_a_forged_build_id_does_not_poison_the_index(tmp_path):
    first, second = build(tmp_path, "first", FIRST), build(tmp_path, "second", SECOND)
    assert build_id(first) == build_id(second)  # the forgery worked: one index file for both
    questions = [("vars", "alpha"), ("vars", "beta"), ("lines", "beta"), ("vars", "gamma_"), ("lines", "alpha")]
    shared = tmp_path / "shared-cache"
    # alternate between the two programs on one cache; each answer must be what a fresh cache gives
    for round_ in range(2):
        for binary in (first, second):
            for command, function in questions:
                if function == "gamma_" and binary == first:
                    continue
                got = cli(shared, command, "-x", str(binary), function)
                fresh = cli(tmp_path / f"fresh-{binary.name}-{command}-{function}-{round_}", command, "-x", str(binary), function)
                assert fresh.returncode == 0, fresh.stderr
                assert (got.returncode, got.stdout) == (0, fresh.stdout), (binary.name, command, function, got.stderr)
    assert len(list((shared / "kprobe-tui").glob("*.index.sqlite"))) == 1  # keyed by the build-id, still
