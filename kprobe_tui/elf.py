"""The one ELF reader: header, sections, load segments and symbol tables, 32- or 64-bit, either byte order.

Every core reads ELF files through this: the uprobe compiler (a function's file offset, a global's
address), the binary catalog (the browser's function list), the DWARF engine (functions by address,
a relocatable file's symbol values), the debug-file locator (sections, build-id notes) and the
x86-64 check of a -x file. It unpacks tables with struct: pyelftools builds an object per symbol
(seconds on a debug vmlinux, benchmarks/bench_elf.py), and importing it costs ~20 ms that a warm
query answered from the index never pays.

Every offset and size comes from the file, so none is trusted: what lies beyond the file, a table
whose entries are not the size its class says, a section index out of range, all raise ``NotElf``
(a ValueError) naming what was wrong; callers turn it into a UserError naming the file.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from kprobe_tui.files import open_regular

ELF_MAGIC = b"\x7fELF"
ELFCLASS32, ELFCLASS64 = 1, 2
ELFDATA2LSB, ELFDATA2MSB = 1, 2
ET_REL = 1
EM_X86_64 = 62
SHT_NOTE, SHT_NOBITS = 7, 8
SHN_UNDEF, SHN_LORESERVE, SHN_ABS, SHN_XINDEX = 0, 0xFF00, 0xFFF1, 0xFFFF
STT_OBJECT, STT_FUNC, STT_GNU_IFUNC = 1, 2, 10
PT_LOAD = 1

# Header, section header, program header and symbol layouts per class (the byte order is prefixed).
_SECTION = {False: "IIIIIIIIII", True: "IIQQQQIIQQ"}  # name type flags addr offset size link info align entsize
_SYMBOL = {False: "IIIBBH", True: "IBBHQQ"}  # 32: name value size info other shndx; 64: name info other shndx value size
_SYMBOL_SIZE = {False: 16, True: 24}


class NotElf(ValueError):
    """Not an ELF file, or one whose headers and tables lead outside it."""


def identify(data: bytes) -> tuple[int, int, int] | None:
    """(class, data encoding, e_machine) of an ELF file's first 20 bytes; None when it is no ELF file."""
    if len(data) < 20 or data[:4] != ELF_MAGIC:
        return None
    elf_class, encoding = data[4], data[5]
    order = ">" if encoding == ELFDATA2MSB else "<"
    return elf_class, encoding, struct.unpack_from(order + "H", data, 18)[0]


@dataclass(frozen=True)
class ElfHeader:
    is64: bool
    order: str  # "<" little-endian, ">" big-endian: prefixed to every struct format
    type: int  # e_type: ET_EXEC, ET_DYN, ET_REL...
    machine: int
    phoff: int
    phentsize: int
    phnum: int
    shoff: int
    shentsize: int
    shnum: int
    shstrndx: int

    @classmethod
    def parse(cls, data: bytes) -> ElfHeader:
        if len(data) < 52 or data[:4] != ELF_MAGIC or data[4] not in (ELFCLASS32, ELFCLASS64) \
                or data[5] not in (ELFDATA2LSB, ELFDATA2MSB):
            raise NotElf("bad ELF magic")
        is64, order = data[4] == ELFCLASS64, "<" if data[5] == ELFDATA2LSB else ">"
        if is64 and len(data) < 64:
            raise NotElf("cut short in its header")
        e_type, machine = struct.unpack_from(order + "HH", data, 16)
        if is64:
            phoff, shoff = struct.unpack_from(order + "QQ", data, 0x20)
            phentsize, phnum, shentsize, shnum, shstrndx = struct.unpack_from(order + "HHHHH", data, 0x36)
        else:
            phoff, shoff = struct.unpack_from(order + "II", data, 0x1C)
            phentsize, phnum, shentsize, shnum, shstrndx = struct.unpack_from(order + "HHHHH", data, 0x2A)
        return cls(is64, order, e_type, machine, phoff, phentsize, phnum, shoff, shentsize, shnum, shstrndx)


class Section(NamedTuple):  # a tuple: an ELF file has dozens, a debug vmlinux ~80 (a dataclass costs 3x)
    number: int  # its index in the section table (readelf's [Nr]); tuple.index is taken
    name: str
    type: int
    flags: int
    addr: int
    offset: int
    size: int
    link: int
    info: int
    align: int
    entsize: int

    @property
    def has_data(self) -> bool:
        return self.type != SHT_NOBITS


@dataclass(frozen=True)
class Segment:
    """A PT_LOAD program header: where ``filesz`` bytes at file ``offset`` are mapped (``vaddr``)."""

    vaddr: int
    filesz: int
    memsz: int
    offset: int


class ElfFile:
    """One ELF file's header and sections, read when made; contents, segments and symbols when asked.

    ``buffer``: the file's bytes already mapped (the DWARF engine's mmap), read instead of the file."""

    def __init__(self, path: str | Path, buffer: bytes | memoryview | None = None, what: str = "ELF file") -> None:
        self.path = path if isinstance(path, Path) else Path(path)
        self._buffer = buffer
        if buffer is not None:
            self.file_size = len(buffer)
            self.header = ElfHeader.parse(bytes(buffer[:64]))
            self.sections = self._read_sections(self._slice)
            return
        with open_regular(self.path, what) as stream:
            self.file_size = os.fstat(stream.fileno()).st_size

            def read(offset: int, size: int) -> bytes:
                self._check_span(offset, size)
                stream.seek(offset)
                return stream.read(size)

            self.header = ElfHeader.parse(stream.read(64))
            self.sections = self._read_sections(read)

    @property
    def is64(self) -> bool:
        return self.header.is64

    @property
    def order(self) -> str:
        return self.header.order

    def _check_span(self, offset: int, size: int) -> None:
        if offset < 0 or size < 0 or offset + size > self.file_size:
            raise NotElf(f"{size} bytes at offset {offset} are beyond the end of the file ({self.file_size} bytes)")

    def _slice(self, offset: int, size: int) -> bytes:
        assert self._buffer is not None  # only called when the file came mapped
        self._check_span(offset, size)
        return bytes(self._buffer[offset : offset + size])

    def _read_sections(self, read) -> list[Section]:
        header = self.header
        if header.shoff == 0:
            return []
        layout = self.order + _SECTION[self.is64]
        entry = struct.calcsize(layout)
        if header.shentsize < entry:
            raise NotElf(f"section headers of {header.shentsize} bytes, less than an ELF{64 if self.is64 else 32} one")
        first = read(header.shoff, header.shentsize)
        first_row = struct.unpack_from(layout, first)
        count = header.shnum or first_row[5]  # extended numbering: the real count is in section 0's size
        if count == 0:
            return []
        names_index = first_row[6] if header.shstrndx == SHN_XINDEX else header.shstrndx
        if count * header.shentsize > self.file_size:
            raise NotElf(f"{count} section headers cannot fit in the file")
        table = first + read(header.shoff + header.shentsize, header.shentsize * (count - 1))
        rows = [struct.unpack_from(layout, table, i * header.shentsize) for i in range(count)]
        if not 0 <= names_index < count:
            raise NotElf(f"the section names are in section {names_index}, of {count}")
        names_row = rows[names_index]
        names = (read(names_row[4], names_row[5]) if names_row[1] != SHT_NOBITS else b"") + b"\0"
        find, make = names.find, Section._make  # _make: no keyword handling, a third of the cost per section
        return [make((index, names[row[0] : find(b"\0", row[0])].decode(errors="replace"), *row[1:]))
                for index, row in enumerate(rows)]

    def section(self, name: str) -> Section | None:
        """The first section of that name (as readelf and pyelftools pick), or None."""
        return next((section for section in self.sections if section.name == name), None)

    def data(self, section: Section) -> bytes:
        """A section's bytes as stored (b"" for NOBITS; compressed sections are not inflated here)."""
        if not section.has_data:
            return b""
        return self.read(section.offset, section.size)

    def read(self, offset: int, size: int) -> bytes:
        if self._buffer is not None:
            return self._slice(offset, size)
        self._check_span(offset, size)
        with open(self.path, "rb") as stream:
            stream.seek(offset)
            data = stream.read(size)
        if len(data) != size:
            raise NotElf(f"the file ended at {offset + len(data)} while reading {size} bytes at {offset}")
        return data

    def load_segments(self) -> list[Segment]:
        """The PT_LOAD segments: how file offsets map to addresses (uprobes are placed by file offset)."""
        header = self.header
        if header.phoff == 0 or header.phnum == 0:
            return []
        layout = self.order + ("IIQQQQQQ" if self.is64 else "IIIIIIII")
        if header.phentsize < struct.calcsize(layout):
            raise NotElf(f"program headers of {header.phentsize} bytes, less than an ELF{64 if self.is64 else 32} one")
        table = self.read(header.phoff, header.phentsize * header.phnum)
        segments = []
        for i in range(header.phnum):
            row = struct.unpack_from(layout, table, i * header.phentsize)
            if self.is64:
                kind, _flags, offset, vaddr, _paddr, filesz, memsz, _align = row
            else:
                kind, offset, vaddr, _paddr, filesz, memsz, _flags, _align = row
            if kind == PT_LOAD:
                segments.append(Segment(vaddr, filesz, memsz, offset))
        return segments

    def symbols(self, name: str) -> SymbolTable | None:
        """The symbol table in section ``name`` (.symtab or .dynsym) with its strings; None when absent or NOBITS."""
        section = self.section(name)
        if section is None or not section.has_data:
            return None
        return self.symbol_table(section)

    def symbol_table(self, section: Section) -> SymbolTable:
        if not 0 <= section.link < len(self.sections):
            raise NotElf(f"{section.name} names its strings in section {section.link}, of {len(self.sections)}")
        if section.entsize not in (0, _SYMBOL_SIZE[self.is64]):
            raise NotElf(f"{section.name} has entries of {section.entsize} bytes, not {_SYMBOL_SIZE[self.is64]}")
        return SymbolTable(self.data(section), self.data(self.sections[section.link]), self.is64, self.order)

    def section_name(self, index: int) -> str:
        """The name of the section a symbol is defined in (``st_shndx``); "*ABS*" and such for special indices."""
        if index == SHN_ABS:
            return "*ABS*"
        return self.sections[index].name if 0 <= index < len(self.sections) else "*ABS*"


class SymbolTable:
    """One .symtab or .dynsym: rows unpacked on demand, names decoded only for the rows asked about.

    The type of a row's symbol is ``st_info & 0xF``, its binding ``st_info >> 4``.
    """

    def __init__(self, data: bytes, strings: bytes, is64: bool, order: str) -> None:
        size = _SYMBOL_SIZE[is64]
        self._data = data[: len(data) - len(data) % size]  # a torn last entry is no symbol
        # NUL-terminated whatever the file says, so a name's end is found by one find(): past the table
        # it is -1, and strings[offset:-1] is empty for an offset beyond the end
        self.strings = strings if strings.endswith(b"\0") else strings + b"\0"
        self._is64 = is64
        self._layout = order + _SYMBOL[is64]

    def __len__(self) -> int:
        return len(self._data) // _SYMBOL_SIZE[self._is64]

    def rows(self) -> Iterator[tuple[int, int, int, int, int, int]]:
        """``(name offset, st_info, st_other, st_shndx, st_value, st_size)`` of every entry: Elf64_Sym's own
        order, unpacked in C with nothing in between; Elf32_Sym's fields are put in the same order."""
        if self._is64:
            return struct.iter_unpack(self._layout, self._data)
        return ((name_at, info, other, shndx, value, size)
                for name_at, value, size, info, other, shndx in struct.iter_unpack(self._layout, self._data))

    def of_types(self, *types: int) -> Iterator[tuple[int, int, int, int, int, int]]:
        """The rows of symbols of those types (STT_FUNC, STT_OBJECT...)."""
        wanted = set(types)
        return (row for row in self.rows() if row[1] & 0xF in wanted)

    def name(self, name_at: int) -> str:
        strings = self.strings
        return strings[name_at : strings.find(b"\0", name_at)].decode(errors="replace")

