"""A compressed debug section is a claim by a file that may be hostile: its Elf_Chdr says how big
it inflates, its zlib or zstd stream may say otherwise. Neither may make kprobe-tui fill the
machine's memory (a red-team file: 6 MB of zlib'd zeros under a header claiming 6 GiB took
`lines` to 12.6 GB resident in 20 s).

The files are real: a C program compiled by gcc, its debug sections compressed by objcopy
(zlib-gabi and zstd), then its .debug_str replaced with ``objcopy --update-section`` (which keeps
SHF_COMPRESSED) by a header and a stream of our making. The CLI runs in a subprocess that reports
its own peak resident memory (VmHWM) as it exits: a child's ru_maxrss starts at its parent's
resident size when it is spawned (a pytest grown to 800 MB by earlier tests made every `lines` here
"800 MB"), and RUSAGE_CHILDREN is the largest of every child this pytest process ever waited for.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path

import pytest
import zstandard

from kprobe_tui.debuginfo.locate import ElfSections
from kprobe_tui.debuginfo.sections import (
    DEFAULT_MAX_SECTION_MB,
    ELFCOMPRESS_ZLIB,
    ELFCOMPRESS_ZSTD,
    MAX_SECTION_ENV,
    SHF_COMPRESSED,
    inflate,
)
from kprobe_tui.errors import UserError
from tests.memory_bound import memory_bound

PROJECT = Path(__file__).resolve().parents[2]
SOURCE = r"""
#include <stdio.h>
static const char *greeting = "hello from a debug string";
int work(int n)
{
	int total = 0;
	for (int i = 0; i < n; i++)
		total += i * 3;
	return total;
}
int main(int argc, char **argv)
{
	(void)argv;
	printf("%s %d\n", greeting, work(argc));
	return 0;
}
"""
CLAIMED = 6 << 30  # what the red-team file's header claimed
STREAMED = 512 << 20  # zeros in the bombs' streams: before the bound, `lines` peaked at 1 GB on them (2.3 MB of zlib)
# `lines` on these files peaks at 22 MB resident with the bound; anything near STREAMED means it inflated
MEMORY_CEILING = 128 << 20
METHODS = {"zlib": (ELFCOMPRESS_ZLIB, "zlib-gabi"), "zstd": (ELFCOMPRESS_ZSTD, "zstd")}


@dataclass(frozen=True)
class Run:
    returncode: int
    stdout: str
    stderr: str
    peak_rss: int  # bytes


# ``python -c PEAK_REPORTER FILE ARGS...`` runs ``kprobe-tui ARGS...`` and, as it exits, writes its peak resident
# memory in kB (VmHWM: this process's own since its exec) to FILE.
PEAK_REPORTER = """
import atexit, runpy, sys

def report(path=sys.argv[1]):
    with open("/proc/self/status") as status, open(path, "w") as out:
        out.write(next(line.split()[1] for line in status if line.startswith("VmHWM:")))

atexit.register(report)
sys.argv = ["kprobe-tui", *sys.argv[2:]]
runpy.run_module("kprobe_tui", run_name="__main__")
"""


def lines(binary: Path, **env: str) -> Run:
    """``kprobe-tui lines -x BINARY work`` in a subprocess, with its peak resident memory."""
    environment = {name: value for name, value in os.environ.items() if name not in (MAX_SECTION_ENV, "DEBUGINFOD_URLS")}
    environment.update(env)
    out, err, peak = (binary.with_suffix(suffix) for suffix in (".out", ".err", ".peak"))
    with out.open("wb") as stdout, err.open("wb") as stderr:
        child = subprocess.run([sys.executable, "-c", PEAK_REPORTER, str(peak), "lines", "-x", str(binary), "work"],
                               cwd=PROJECT, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, env=environment)
    return Run(child.returncode, out.read_text(), err.read_text(), int(peak.read_text()) * 1024)


def chdr(kind: int, size: int) -> bytes:
    """An Elf64_Chdr (little-endian, as x86-64 files are)."""
    return struct.pack("<IIQQ", kind, 0, size, 1)


def compress(kind: int, chunks) -> bytes:
    """zlib or zstd streamed (a zstd frame that does not state its size, as a bomb's would not)."""
    compressor = zlib.compressobj(1) if kind == ELFCOMPRESS_ZLIB else zstandard.ZstdCompressor().compressobj()
    return b"".join(compressor.compress(chunk) for chunk in chunks) + compressor.flush()


def zeros(kind: int, total: int) -> bytes:
    chunk = bytes(1 << 20)
    return compress(kind, (chunk for _ in range(total // len(chunk))))


@dataclass(frozen=True)
class Program:
    root: Path
    plain: Path
    compressed: dict[str, Path]  # method -> the program with its debug sections compressed by objcopy
    strings: bytes  # the plain program's .debug_str
    reference: str  # `lines` on the plain program


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Program:
    missing = [tool for tool in ("gcc", "objcopy") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (.ci/run installs gcc and binutils)")
    root = tmp_path_factory.mktemp("compressed")
    (root / "prog.c").write_text(SOURCE)
    plain = root / "prog"
    subprocess.run(["gcc", "-g", "-O0", "prog.c", "-o", str(plain)], cwd=root, check=True)
    compressed = {}
    for method, (_kind, option) in METHODS.items():
        target = root / f"prog.{method}"
        if subprocess.run(["objcopy", f"--compress-debug-sections={option}", str(plain), str(target)],
                          capture_output=True).returncode == 0:
            compressed[method] = target
    reference = lines(plain)
    assert reference.returncode == 0 and "total += i * 3" in reference.stdout, reference.stderr
    return Program(root, plain, compressed, ElfSections(plain).data(".debug_str") or b"", reference.stdout)


def compressed_program(program: Program, method: str) -> Path:
    if method not in program.compressed:
        pytest.skip(f"this objcopy cannot --compress-debug-sections={METHODS[method][1]}")
    return program.compressed[method]


def with_debug_str(program: Program, method: str, contents: bytes, name: str) -> Path:
    """The compressed program with its .debug_str replaced by ``contents`` (a header and a stream), still SHF_COMPRESSED."""
    section = program.root / f"{name}.{method}.debug_str"
    section.write_bytes(contents)
    target = program.root / f"{name}.{method}"
    subprocess.run(["objcopy", f"--update-section=.debug_str={section}", str(compressed_program(program, method)),
                    str(target)], check=True, capture_output=True)
    assert ElfSections(target).sections[".debug_str"].flags & SHF_COMPRESSED, "objcopy dropped SHF_COMPRESSED"
    return target


def refused(run: Run, binary: Path) -> str:
    """The CLI's message, after checking it is a UserError's (exit 2), not a crash, and that nothing was inflated."""
    assert run.returncode == 2, (run.returncode, run.stderr)
    assert run.peak_rss < MEMORY_CEILING, f"{run.peak_rss >> 20} MiB resident"
    assert f"{binary}: section .debug_str" in run.stderr
    return run.stderr


@pytest.mark.parametrize("method", METHODS)
def test_compressed_sections_read_as_the_uncompressed_file(program, method):
    run = lines(compressed_program(program, method))
    assert run.returncode == 0, run.stderr
    assert run.stdout == program.reference


@pytest.mark.parametrize("method", METHODS)
def test_a_header_claiming_more_than_the_bound_is_refused_before_inflating(program, method):
    kind = METHODS[method][0]
    bomb = with_debug_str(program, method, chdr(kind, CLAIMED) + zeros(kind, STREAMED), "claims-6GiB")
    message = refused(lines(bomb), bomb)
    assert f"claims to inflate to {CLAIMED} bytes" in message
    assert f"{DEFAULT_MAX_SECTION_MB} MiB" in message
    assert f"{MAX_SECTION_ENV}={CLAIMED >> 20}" in message  # how to raise the bound, for a genuine file


@pytest.mark.parametrize("method", METHODS)
def test_a_stream_longer_than_its_header_says_is_stopped_past_the_claim(program, method):
    kind = METHODS[method][0]
    bomb = with_debug_str(program, method, chdr(kind, 4096) + zeros(kind, STREAMED), "claims-4KiB")
    assert "inflates to more than 4096 bytes, its header says 4096" in refused(lines(bomb), bomb)


@pytest.mark.parametrize("method", METHODS)
def test_a_stream_shorter_than_its_header_says_is_refused(program, method):
    kind = METHODS[method][0]
    claimed = len(program.strings) + 100
    short = with_debug_str(program, method, chdr(kind, claimed) + compress(kind, [program.strings]), "short")
    message = refused(lines(short), short)
    assert f"inflates to only {len(program.strings)} bytes, its header says {claimed}" in message


@pytest.mark.parametrize("method", METHODS)
def test_bytes_that_are_not_compressed_data_are_a_damaged_file(program, method):
    kind = METHODS[method][0]
    damaged = with_debug_str(program, method, chdr(kind, 4096) + b"not compressed at all" * 8, "garbage")
    assert f"is not valid {method} data" in refused(lines(damaged), damaged)


@pytest.mark.parametrize("method", METHODS)
def test_a_genuine_section_above_the_bound_is_read_once_the_environment_raises_it(program, method):
    kind = METHODS[method][0]
    padded = program.strings + bytes(3 << 20)  # strings after the real ones change nothing the DWARF refers to
    big = with_debug_str(program, method, chdr(kind, len(padded)) + compress(kind, [padded]), "big")
    message = refused(lines(big, **{MAX_SECTION_ENV: "2"}), big)
    assert "more than the 2 MiB" in message and f"{MAX_SECTION_ENV}=4" in message
    run = lines(big, **{MAX_SECTION_ENV: "4"})
    assert run.returncode == 0, run.stderr
    assert run.stdout == program.reference


def test_a_bound_that_is_not_a_size_is_refused(program):
    run = lines(compressed_program(program, "zlib"), **{MAX_SECTION_ENV: "lots"})
    assert run.returncode == 2, run.stderr
    assert f"{MAX_SECTION_ENV}='lots' is not a size in MiB" in run.stderr


@pytest.mark.parametrize("is64", [True, False])
def test_a_section_shorter_than_its_compression_header_is_a_damaged_file(is64):
    """Found by tests/property: a few bytes with the compressed flag raised struct.error (an internal error)."""
    with pytest.raises(UserError, match="shorter than its compression header"):
        inflate(b"\x01\x00", is64, "<", Path("tz.o"), ".debug_info")


@pytest.mark.parametrize("kind", [ELFCOMPRESS_ZLIB, ELFCOMPRESS_ZSTD])
def test_a_small_stream_under_a_large_claim_takes_memory_for_what_it_inflates_to(kind):
    """A 1000 MiB claim (within the bound) over a 100-byte stream: zstd's reader.read(limit) allocated
    the whole claim up front, a MemoryError (exit 70) under any address-space limit (ulimit -v) below it."""
    section = chdr(kind, 1000 << 20) + compress(kind, [b"x" * 100])
    with memory_bound(256 << 20), pytest.raises(UserError, match="inflates to only 100 bytes, its header says"):
        inflate(section, True, "<", Path("big.o"), ".debug_str")
