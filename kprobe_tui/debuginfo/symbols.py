"""A debug file's function symbols by address: naming a place DWARF does not (no subprogram holds it),
and the name -> unit pairs the per-build-id index starts from.

Read with the one ELF reader from the mapped file; names are decoded only for the symbols asked about
(a debug vmlinux has ~150k). A relocatable file's symbols (a kernel module) are placed where its DWARF
was relocated to (``DebugSections.symbol_address``), so addresses mean the same in both.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from kprobe_tui.elf import STT_FUNC, ElfFile

if TYPE_CHECKING:
    from kprobe_tui.debuginfo.sections import DebugSections

# How far below an address a containing function's start is looked for: functions are not larger.
_LONGEST_FUNCTION = 1 << 20


@dataclass(frozen=True)
class FunctionSymbol:
    name: str
    address: int
    size: int


class FunctionSymbols:
    """FUNC symbols of .symtab (else .dynsym) that are defined and have an address."""

    def __init__(self, elf: ElfFile, sections: DebugSections | None = None) -> None:
        self._entries: list[tuple[int, int, int]] = []  # (name offset, address, size)
        self._table = elf.symbols(".symtab") or elf.symbols(".dynsym")
        if self._table is None:
            return
        func = STT_FUNC  # a local: this loop runs once per symbol, ~150k on a debug vmlinux
        entries = self._entries
        if sections is not None and sections.is_relocatable:
            place = sections.symbol_address
            for name_at, info, _other, shndx, value, size in self._table.rows():
                if info & 0xF == func and shndx != 0:
                    address = place(shndx, value)
                    if address:
                        entries.append((name_at, address, size))
            return
        for name_at, info, _other, shndx, value, size in self._table.rows():
            if info & 0xF == func and shndx != 0 and value:
                entries.append((name_at, value, size))

    @cached_property
    def _by_address(self) -> tuple[list[int], list[tuple[int, int, int]]]:
        entries = sorted(self._entries, key=lambda e: e[1])
        return [e[1] for e in entries], entries

    def containing(self, address: int) -> FunctionSymbol | None:
        starts, entries = self._by_address
        i = bisect.bisect_right(starts, address) - 1
        while i >= 0:
            name_at, value, size = entries[i]
            if value <= address < value + max(size, 1):
                assert self._table is not None  # there are entries only when there is a table
                return FunctionSymbol(self._table.name(name_at), value, size)
            if value < address - _LONGEST_FUNCTION:
                break
            i -= 1
        return None

    def names(self) -> Iterator[tuple[str, int]]:
        strings = self._table.strings if self._table is not None else b""
        for name_at, value, _ in self._entries:  # SymbolTable.name, inlined: once per function of the file
            yield strings[name_at : strings.find(b"\0", name_at)].decode(errors="replace"), value
