"""A user binary's symbols as uprobes need them: each function's address, size and file offset, and globals.

Uprobes are placed by file offset (``/path:0xOFFSET``) and read a global at ``@+X`` relative to where
the probed segment maps offset 0, so the PT_LOAD segments come with the symbols. Read through the one
ELF reader (``kprobe_tui.elf``); cached per path, since the builder compiles many specs against one file.
"""

from __future__ import annotations

import bisect
import shlex
import struct
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from kprobe_tui.elf import STT_FUNC, STT_GNU_IFUNC, STT_OBJECT, ElfFile, NotElf
from kprobe_tui.errors import UserError
from kprobe_tui.machine import require_x86_64_elf

# What reading a corrupt ELF file raises here: offsets that lead outside it, tables of the wrong shape.
ELF_READ_ERRORS = (NotElf, OSError, struct.error)


@dataclass(frozen=True)
class ElfSymbol:
    name: str
    address: int  # virtual address in the file
    size: int
    file_offset: int  # what a uprobe place needs


class ElfSymbols:
    """Function symbols of one ELF file and the virtual-address -> file-offset map of its segments."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        require_x86_64_elf(self.path)
        try:
            elf = ElfFile(self.path, what="-x file")
            self.has_debug_info = elf.section(".debug_info") is not None
            self.segments = [(segment.vaddr, segment.filesz, segment.offset) for segment in elf.load_segments()]
            self.functions: dict[str, list[ElfSymbol]] = {}
            for table in filter(None, map(elf.symbols, (".symtab", ".dynsym"))):
                for name_at, info, _other, _shndx, value, size in table.rows():
                    if info & 0xF not in (STT_FUNC, STT_GNU_IFUNC) or not value:
                        continue
                    name = table.name(name_at)
                    same = self.functions.setdefault(name, [])
                    if all(s.address != value for s in same):
                        same.append(ElfSymbol(name, value, size, self.file_offset(value)))
        except ELF_READ_ERRORS as exc:  # a symbol or program header table whose offsets lead nowhere
            raise UserError(f"{str(path)!r}: not a readable ELF file ({type(exc).__name__}: {exc})",
                            "give an executable or shared library") from None

    def file_offset(self, address: int) -> int:
        """Where a virtual address sits in the file: uprobes are placed by file offset."""
        for vaddr, filesz, offset in self.segments:
            if vaddr <= address < vaddr + filesz:
                return address - vaddr + offset
        raise UserError(f"0x{address:x} is in no loadable segment of {self.path}", "probe an address inside the code")

    def function(self, name: str) -> ElfSymbol:
        found = self.functions.get(name)
        if not found:
            raise UserError(
                f"{name!r}: no such function in {self.path}",
                f"list them with: kprobe-tui funcs -x {shlex.quote(str(self.path))}, or nm -D {shlex.quote(str(self.path))}",
            )
        if len(found) > 1:
            where = ", ".join(f"0x{s.address:x}" for s in found)
            raise UserError(f"{name!r}: {len(found)} functions share this name in {self.path} ({where})", "probe by FUNC@SRC or by address")
        return found[0]

    def containing(self, address: int) -> ElfSymbol | None:
        """The function an address is in, for naming the place the way perf and bpftrace do."""
        for symbols in self.functions.values():
            for sym in symbols:
                if sym.address <= address < sym.address + max(sym.size, 1):
                    return sym
        return None


@lru_cache(maxsize=16)
def elf_symbols(path: str) -> ElfSymbols:
    return ElfSymbols(path)


def symbol_address(binary: str, name: str) -> int:
    """Where ``@name`` is in a user binary: the first symbol of that name with a value (.symtab, then .dynsym)."""
    address = _symbol_addresses(binary).get(name)
    if address is None:
        raise UserError(f"@{name}: no such symbol in {binary}", f"list them with: nm {shlex.quote(binary)}")
    return address


@lru_cache(maxsize=4)
def _symbol_addresses(binary: str) -> dict[str, int]:
    found: dict[str, int] = {}
    try:
        elf = ElfFile(binary, what="-x file")
        for table in filter(None, map(elf.symbols, (".symtab", ".dynsym"))):
            for name_at, _info, _other, _shndx, value, _size in table.rows():
                if value:
                    found.setdefault(table.name(name_at), value)
    except ELF_READ_ERRORS as exc:
        raise UserError(f"{binary!r}: not a readable ELF file ({type(exc).__name__}: {exc})",
                        "give an executable or shared library") from None
    return found


@lru_cache(maxsize=4)
def data_symbols(path: str) -> list[tuple[int, int, str]]:
    """(address, size, name) of the objects (globals) in a file's .symtab, sorted by address."""
    table = ElfFile(path, what="debug file").symbols(".symtab")
    if table is None:
        return []
    return sorted((value, size, table.name(name_at))
                  for name_at, info, _other, _shndx, value, size in table.rows() if info & 0xF == STT_OBJECT and value)


def data_symbol_containing(path: str, address: int) -> tuple[str, int]:
    """The global an address is in, and how far into it: the kernel reads globals as ``@symbol+offset``."""
    symbols = data_symbols(path)
    i = bisect.bisect_right(symbols, (address, float("inf"), "")) - 1
    if i >= 0 and symbols[i][0] <= address < symbols[i][0] + max(symbols[i][1], 1):
        return symbols[i][2], address - symbols[i][0]
    raise UserError(f"0x{address:x}: no data symbol there in {path}", "the kernel can only read globals by symbol name")
