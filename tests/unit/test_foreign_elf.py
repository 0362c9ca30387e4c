"""-x on an ELF file for another machine is refused with what it is: fetch-args name x86-64 registers,
so a probe compiled for a 32-bit x86 program read %di where its arguments are not (zeros, silently)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kprobe_tui.errors import UserError
from kprobe_tui.probes.binary import BinaryCatalog

SOURCE = "int work(int n) { return n + 1; }\nint main(void) { return work(1); }\n"


@pytest.fixture(scope="module")
def foreign(tmp_path_factory) -> dict[str, Path]:
    """A real 32-bit x86 program (gcc -m32 compiles; ld links it without a 32-bit libc), and an x86-64
    build relabelled as AArch64 and as big-endian (the header is what says what a file is for)."""
    out = tmp_path_factory.mktemp("foreign")
    (out / "prog.c").write_text(SOURCE)
    subprocess.run(["gcc", "-g", "-O0", "-o", str(out / "x86_64"), str(out / "prog.c")], check=True)
    built = {}
    made = subprocess.run(["gcc", "-m32", "-g", "-O0", "-c", "-o", str(out / "i386.o"), str(out / "prog.c")],
                          capture_output=True)
    if made.returncode == 0:
        subprocess.run(["ld", "-m", "elf_i386", "-e", "main", "-o", str(out / "i386"), str(out / "i386.o")], check=True)
    else:  # no 32-bit gcc support: the x86-64 build's header rewritten to ELFCLASS32 / EM_386
        data = bytearray((out / "x86_64").read_bytes())
        data[4], data[18:20] = 1, (3).to_bytes(2, "little")
        (out / "i386").write_bytes(data)
    built["32-bit x86 (i386)"] = out / "i386"
    for name, offset, value in (("AArch64 (arm64)", 18, (183).to_bytes(2, "little")), ("big-endian", 5, b"\x02")):
        data = bytearray((out / "x86_64").read_bytes())
        data[offset : offset + len(value)] = value
        path = out / name.split()[0].lower()
        path.write_bytes(data)
        built[name] = path
    return built


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kprobe_tui", *args], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


COMMANDS = [
    ["lines", "-x", "{path}", "work"],
    ["vars", "-x", "{path}", "work"],
    ["probe", "-n", "-x", "{path}", "work", "n"],
    ["probe", "-n", "-x", "{path}", "work", "$arg1"],  # no debug info needed: the raw compiler too
    ["probe", "-x", "{path}", "work", "$arg1"],
    ["-x", "{path}"],  # the TUI
]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a[:2]))
@pytest.mark.parametrize("machine", ["32-bit x86 (i386)", "AArch64 (arm64)", "big-endian"])
def test_every_command_refuses_a_foreign_elf(foreign, args, machine):
    path = foreign[machine]
    result = cli(*(arg.format(path=path) for arg in args))
    # probe exits as perf probe does when it finds no place to probe (-ENOENT); the other commands with 2
    assert result.returncode == (254 if args[0] == "probe" else 2), result.stdout + result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert f"{path}: a " in result.stderr and "kprobe-tui compiles probes for x86-64 only" in result.stderr
    assert machine.split()[0] in result.stderr or machine == "big-endian" and "big-endian" in result.stderr
    assert not leftovers(path)


def leftovers(path: Path) -> list[str]:
    """Probes on ``path`` (our test's own file) in the live kernel, removed if any: a regression must
    not leave a persistent probe behind."""
    events = Path("/sys/kernel/tracing/uprobe_events")
    if not os.access(events, os.R_OK | os.W_OK):
        return []
    found = [line.split()[0] for line in events.read_text().splitlines() if f" {path}:" in line]
    for name in found:
        with open(events, "a") as out:
            out.write(f"-:{name.split(':', 1)[1]}\n")
    return found


def test_the_browser_refuses_it_too(foreign):
    with pytest.raises(UserError, match="x86-64 only"):
        BinaryCatalog(foreign["32-bit x86 (i386)"])


def test_an_x86_64_build_is_accepted(foreign):
    assert "work" in BinaryCatalog(foreign["32-bit x86 (i386)"].with_name("x86_64")).names
