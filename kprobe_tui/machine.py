"""The machine kprobe-tui compiles probes for, and the check that a user binary (-x) is built for it.

Fetch-args name x86-64 registers: ``$argN`` becomes %di, %si, ... and DWARF register numbers map to
x86-64's names. A 32-bit x86 binary passes its arguments on the stack and numbers its registers
differently, so a probe compiled for it reads the wrong places and records garbage without any
error; the same goes for other architectures. So -x refuses every ELF file but a 64-bit
little-endian x86-64 one, saying what it is instead.
"""

from __future__ import annotations

from pathlib import Path

from kprobe_tui.elf import ELFCLASS32, ELFCLASS64, ELFDATA2LSB, ELFDATA2MSB, EM_X86_64, identify
from kprobe_tui.errors import UserError
from kprobe_tui.files import open_regular

_MACHINES = {3: "32-bit x86 (i386)", 8: "MIPS", 20: "PowerPC", 21: "64-bit PowerPC", 22: "s390", 40: "32-bit ARM",
             62: "x86-64", 183: "AArch64 (arm64)", 243: "RISC-V", 258: "LoongArch"}


def require_x86_64_elf(path: str | Path, what: str = "-x") -> None:
    """Nothing when ``path`` is an x86-64 ELF file; else a UserError saying what it is (and for a FIFO
    or a device, that it is not a file at all: this is the first open of a -x path)."""
    with open_regular(path, f"{what} file") as stream:
        identity = identify(stream.read(20))
    hint = f"{what} takes a compiled x86-64 program or shared library"
    if identity is None:
        raise UserError(f"{path}: not an ELF file", hint)
    elf_class, data, machine = identity
    if elf_class not in (ELFCLASS32, ELFCLASS64) or data not in (ELFDATA2LSB, ELFDATA2MSB):
        raise UserError(f"{path}: not a valid ELF file (class {elf_class}, data encoding {data})", hint)
    if (elf_class, data, machine) == (ELFCLASS64, ELFDATA2LSB, EM_X86_64):
        return
    name = _MACHINES.get(machine, f"machine {machine}")
    if machine == EM_X86_64 and elf_class != ELFCLASS64:
        name = "x32 (32-bit x86-64 ABI)"
    bits = "64-bit" if elf_class == ELFCLASS64 else "32-bit"
    order = "little-endian" if data == ELFDATA2LSB else "big-endian"
    raise UserError(
        f"{path}: a {bits} {order} ELF file for {name}; kprobe-tui compiles probes for x86-64 only "
        "(its fetch-args name x86-64 registers: on this file they would read the wrong places)",
        "probe a 64-bit x86-64 build of it (e.g. gcc -m64), or use perf probe on its own machine",
    )
