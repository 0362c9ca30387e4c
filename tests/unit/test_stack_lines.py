"""User frames with their ``file:line`` and the functions inlined at them (``UserFrames`` over a live process's
maps; no probe needed), and the lookups beneath (``DebugInfo.source_line``, ``source_frames``) against binutils'
addr2line (``-i -f`` for the inlined) on every address of a compiled program. tests/live/test_stacks_live.py
counts real stacks and compares them with perf and addr2line."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from kprobe_tui.aggregate.stackrun import MAX_SOURCE_NAME, UserFrames
from kprobe_tui.debuginfo.scope import open_debuginfo
from kprobe_tui.elf import ElfFile
from kprobe_tui.errors import UserError
from kprobe_tui.textsafe import printable

SOURCE = r"""
#include <unistd.h>
volatile int sink;
static inline int square(int x) { return x * x; }
__attribute__((noinline)) int deep(int x) { return square(x) + 1; }
__attribute__((noinline)) int leaf(int x) {
    int d = deep(x);
    sink = d;
    return d + 1;
}
int main(void) {
    int r = leaf(sink);
    sink = r;
    pause();
    return 0;
}
"""
LIBC = Path("/lib/x86_64-linux-gnu/libc.so.6")


def build(directory: Path, name: str, *flags: str, source: str = SOURCE) -> Path:
    (directory / f"{name}.c").write_text(source)
    subprocess.run(["gcc", "-O2", "-fno-omit-frame-pointer", *flags, "-o", str(directory / name),
                    str(directory / f"{name}.c")], check=True)
    return directory / name


def addr2line(program: Path, addresses: list[int], tool: str = "addr2line") -> list[str | None]:
    """``file:line`` (the base name, as perf prints it) of each address, None where the tool has no line."""
    out = subprocess.run([tool, "-e", str(program)], input="\n".join(f"{a:#x}" for a in addresses),
                         capture_output=True, text=True, check=True).stdout.splitlines()
    lines: list[str | None] = []
    for text in out:
        file, _, line = text.split(" (discriminator", 1)[0].rpartition(":")
        lines.append(None if file in ("??", "") or line in ("?", "0") else f"{os.path.basename(file)}:{line}")
    return lines


def addr2line_inlined(program: Path, addresses: list[int]) -> list[list[tuple[str, str]]]:
    """``addr2line -a -i -f``: each address's (function, file:line) pairs, outermost first (it prints the
    innermost first); [] where it has no line."""
    out = subprocess.run(["addr2line", "-a", "-i", "-f", "-e", str(program)], input="\n".join(f"{a:#x}" for a in addresses),
                         capture_output=True, text=True, check=True).stdout.splitlines()
    found: list[list[tuple[str, str]]] = []
    for text in out:
        if text.startswith("0x"):
            found.append([])
        elif found[-1] and found[-1][-1][1] == "":
            file, _, line = text.split(" (discriminator", 1)[0].rpartition(":")
            found[-1][-1] = (found[-1][-1][0], f"{os.path.basename(file)}:{line}")
        else:
            found[-1].append((text, ""))
    return [[] if pairs[0][1].startswith("??:") or pairs[0][1].endswith((":0", ":?")) else pairs[::-1]
            for pairs in found]


def looked_up(program: Path, addresses: list[int]) -> list[str | None]:
    info = open_debuginfo(binary=str(program))
    found = [info.source_line(address) for address in addresses]
    return [f"{os.path.basename(where[0])}:{where[1]}" if where else None for where in found]


@pytest.mark.parametrize("aranges", [True, False], ids=["aranges", "no-aranges"])
def test_every_address_of_a_program_has_the_line_addr2line_gives(tmp_path, aranges):
    """-O2 with an inlined function; without .debug_aranges (what clang emits) the units' own ranges map."""
    program = build(tmp_path, "kpt_lines", "-g")
    if not aranges:
        subprocess.run(["objcopy", "--remove-section", ".debug_aranges", str(program)], check=True)
    text = ElfFile(program).section(".text")
    assert text is not None
    addresses = list(range(text.addr, text.addr + text.size))
    expected = addr2line(program, addresses)
    assert sum(line is not None for line in expected) > 50
    assert looked_up(program, addresses) == expected


def test_every_address_of_a_program_has_the_inlined_functions_addr2line_i_gives(tmp_path):
    """Two levels of inlining at -O2: each address's chain, the outermost function's name aside (the frame
    names it from the symbol table)."""
    source = SOURCE.replace("static inline int square(int x) { return x * x; }",
                            "static inline int twice(int x) { return x + x * sink; }\n"
                            "static inline int square(int x) { return twice(x) * x; }")
    program = build(tmp_path, "kpt_inl", "-g", source=source)
    text = ElfFile(program).section(".text")
    assert text is not None
    addresses = list(range(text.addr, text.addr + text.size))
    expected = addr2line_inlined(program, addresses)
    assert any(len(chain) == 3 for chain in expected)  # deep, square, twice
    info = open_debuginfo(binary=str(program))
    for address, chain in zip(addresses, expected):
        ours = [(name, f"{os.path.basename(file)}:{line}") for name, (file, line) in info.source_frames(address)]
        assert ours == [(None, chain[0][1]), *chain[1:]] if chain else ours == [], hex(address)


@pytest.mark.skipif(not shutil.which("llvm-addr2line") or not LIBC.exists(), reason="needs llvm-addr2line and libc")
def test_libc_lines_from_its_debug_file_are_llvm_addr2lines():
    """libc's separate debug file (libc6-dbg), DWARF 5 with many files a unit: binutils 2.40's addr2line (and
    so perf 6.1) names some rows' file wrongly here (libc-start.c for libc_start_call_main.h), llvm's does not."""
    try:
        open_debuginfo(binary=str(LIBC))
    except UserError:
        pytest.skip("libc's debug info is not installed")
    text = ElfFile(LIBC).section(".text")
    assert text is not None
    addresses = list(range(text.addr, text.addr + text.size, 401))
    assert looked_up(LIBC, addresses) == addr2line(LIBC, addresses, "llvm-addr2line")


class Running:
    """A program started and paused, its load base and symbols: what UserFrames names addresses of."""

    def __init__(self, program: Path, symbols_from: Path | None = None) -> None:
        self.program = program
        self.proc = subprocess.Popen([str(program)])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            maps = Path(f"/proc/{self.proc.pid}/maps").read_text()
            base = next((line.split("-")[0] for line in maps.splitlines()
                         if line.endswith(str(program)) and " 00000000 " in line), None)
            if base is not None:
                self.base = int(base, 16)
                break
            time.sleep(0.01)
        else:
            raise AssertionError(f"{program} never mapped")
        nm = subprocess.run(["nm", str(symbols_from or program)], capture_output=True, text=True, check=True).stdout
        self.symbols = {fields[2]: int(fields[0], 16) for fields in map(str.split, nm.splitlines()) if len(fields) == 3}

    def frame(self, vaddr: int) -> str:
        """The frame as the kernel prints it (a PIE's link-time addresses start at its load base)."""
        return f"<{self.base + vaddr:016x}>"

    def return_into(self, caller: str, callee: str) -> int:
        """The address after ``caller``'s call of ``callee``."""
        disassembly = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(self.program)],
                                     capture_output=True, text=True, check=True).stdout
        body = disassembly.split(f"<{caller}>:\n", 1)[1].split("\n\n", 1)[0].splitlines()
        call = next(index for index, line in enumerate(body) if re.search(rf"call\s+\w+ <{callee}>", line))
        return int(body[call + 1].split(":")[0], 16)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def running():
    started: list[Running] = []

    def start(program: Path, symbols_from: Path | None = None) -> Running:
        started.append(Running(program, symbols_from))
        return started[-1]

    yield start
    for each in started:
        each.stop()


def test_a_program_built_with_g_names_each_frame_s_line_and_a_return_address_s_call(tmp_path, running):
    program = build(tmp_path, "kpt_g", "-g")
    process = running(program)
    frames = UserFrames()
    deep = process.symbols["deep"]
    back = process.return_into("leaf", "deep")
    call_line, after_call_line = addr2line(program, [back - 1, back])
    assert call_line != after_call_line  # the program is built so that they differ
    [(_, square_called), (inlined, square_line)] = addr2line_inlined(program, [deep])[0]
    assert inlined == "square"  # the program is built so that deep's first instruction is square's
    assert frames.name(process.proc.pid, process.frame(deep)) == (
        f"deep+0x0 [{program.name}] {square_called}", f"square [{program.name}] (inlined) {square_line}")
    assert (frames.name(process.proc.pid, process.frame(back), returned=True)
            == (f"leaf+{back - process.symbols['leaf']:#x} [{program.name}] {call_line}",))


def test_without_debug_info_the_names_are_what_they_were(tmp_path, running):
    """No -g, or the DWARF stripped: ``function+0xN [prog]`` alone; every symbol stripped: ``prog+0xOFFSET``."""
    plain = build(tmp_path, "kpt_plain")
    no_dwarf = build(tmp_path, "kpt_nodwarf", "-g")
    subprocess.run(["strip", "--strip-debug", str(no_dwarf)], check=True)
    bare = build(tmp_path, "kpt_bare")
    subprocess.run(["strip", "--strip-all", str(bare)], check=True)
    for program in (plain, no_dwarf):
        process = running(program)
        deep = process.symbols["deep"]
        assert UserFrames().name(process.proc.pid, process.frame(deep)) == (f"deep+0x0 [{program.name}]",)
    process = running(bare, symbols_from=plain)
    deep = process.symbols["deep"]  # the same build: a PIE whose text's addresses are its file offsets
    assert UserFrames().name(process.proc.pid, process.frame(deep)) == (f"{bare.name}+{deep:#x}",)


def test_a_stripped_program_takes_its_lines_from_the_debug_file_its_debuglink_names(tmp_path, running):
    program = build(tmp_path, "kpt_split", "-g")
    unstripped = tmp_path / "kpt_split.full"
    shutil.copy(program, unstripped)
    debug = tmp_path / "kpt_split.debug"
    subprocess.run(["objcopy", "--only-keep-debug", str(program), str(debug)], check=True)
    subprocess.run(["strip", "--strip-all", str(program)], check=True)
    subprocess.run(["objcopy", f"--add-gnu-debuglink={debug}", str(program)], check=True)
    process = running(program, symbols_from=unstripped)
    deep = process.symbols["deep"]
    [(_, called), (_, line)] = addr2line_inlined(unstripped, [deep])[0]
    assert UserFrames().name(process.proc.pid, process.frame(deep)) == (
        f"{program.name}+{deep:#x} {called}", f"square [{program.name}] (inlined) {line}")


def test_a_hostile_file_name_is_bounded_and_printed_escaped(tmp_path, running):
    """DWARF names the file whatever ``#line`` says: here a terminal's escape and bell, and 600 letters."""
    hostile = SOURCE.replace("volatile int sink;", '#line 1 "\\033]0;owned\\007' + "a" * 600 + '.c"\nvolatile int sink;')
    program = build(tmp_path, "kpt_hostile", "-g", source=hostile)
    process = running(program)
    named = UserFrames().name(process.proc.pid, process.frame(process.symbols["deep"]))
    prefixes = (f"deep+0x0 [{program.name}] ", f"square [{program.name}] (inlined) ")
    for frame, prefix in zip(named, prefixes, strict=True):
        assert frame.startswith(prefix + "\x1b]0;owned\x07aaa") and len(frame) == len(prefix) + MAX_SOURCE_NAME + len(":4")
        shown = printable(frame)
        assert "\x1b" not in shown and "\x07" not in shown and "\\x1b]0;owned\\x07" in shown


@pytest.mark.parametrize(("section", "kept"), [(".debug_line", 4), (".debug_info", 12), (".debug_abbrev", 0)])
def test_corrupt_debug_info_leaves_the_names_without_lines(tmp_path, running, section, kept):
    """The section's bytes past its first ``kept`` (a unit's length, a unit's header) overwritten with 0xff."""
    program = build(tmp_path, "kpt_corrupt", "-g")
    found = ElfFile(program).section(section)
    assert found is not None
    with open(program, "r+b") as file:
        file.seek(found.offset + kept)
        file.write(b"\xff" * (found.size - kept))
    process = running(program)
    deep = process.symbols["deep"]
    with pytest.raises(UserError, match="is corrupt"):
        open_debuginfo(binary=str(program)).source_line(deep)
    frames = UserFrames()
    for offset in (0, 1):  # the second address named from what the first learnt of the file
        assert frames.name(process.proc.pid, process.frame(deep + offset)) == (f"deep+{offset:#x} [{program.name}]",)
