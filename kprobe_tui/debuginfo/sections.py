"""The debug sections of an ELF file, as pyelftools reads them: in place, decompressed or relocated.

Most files need nothing: a section is a window on the mmap (``MappedStream``) and nothing is
copied. Two kinds do:

- ``SHF_COMPRESSED`` sections (``gcc -gz``, ``objcopy --compress-debug-sections``), zlib or zstd:
  inflated into memory once. Python 3.11 has no zstd, so the ``zstandard`` module is imported
  only when a zstd section is met, and its absence is a message saying what to install. The
  header's size is a claim by a file that may be hostile (a debuginfod server's, say): a section
  may inflate to ``max_section_size()`` at most, and inflating stops one byte past the claim, so
  6 MB of zlib'd zeros claiming 6 GiB is refused instead of filling the machine's memory.
- relocatable files (``ET_REL``: a kernel module's debug file, Debian's ``.ko`` or Fedora's
  ``.ko.debug``): their DWARF holds addresses and offsets only after relocation. Every
  allocated section starts at 0 in such a file, so ``.text`` and ``.init.text`` would overlap;
  they are laid out one after the other first, as libdwfl does for perf (``section_layout``),
  and the relocations applied against that layout. Symbol values use the same layout, so an
  address means the same thing in the DWARF, the symbol table and the call-frame information.
"""

from __future__ import annotations

import io
import mmap
import os
import struct
import zlib
from functools import cached_property
from pathlib import Path
from typing import Any

from kprobe_tui.elf import SHN_ABS, SHN_LORESERVE, SymbolTable
from kprobe_tui.errors import UserError

SHF_ALLOC = 0x2
SHF_COMPRESSED = 0x800
SHT_RELA = 4
ELFCOMPRESS_ZLIB, ELFCOMPRESS_ZSTD = 1, 2
EM_X86_64 = 62
# The most one compressed section may inflate to, in MiB. The biggest real section we know, .debug_info
# of Debian's debug vmlinux 6.1.0-57-amd64, is 166 MiB (174,259,051 bytes; its .debug_loclists 23 MiB):
# 1 GiB leaves room for bigger kernels and still refuses a header that claims gigabytes.
MAX_SECTION_ENV = "KPROBE_TUI_MAX_SECTION_MB"
DEFAULT_MAX_SECTION_MB = 1024
ZSTD_CHUNK = 16 << 20  # what a zstd section is inflated by at a time: a claim is no reason to allocate
# x86-64 relocation types found in debug sections: (struct format of the field, pc-relative)
R_X86_64 = {1: ("Q", False), 2: ("i", True), 10: ("I", False), 11: ("i", False), 24: ("q", True)}  # 64, PC32, 32, 32S, PC64


class MappedStream:
    """A read-only file-like view of one section of an mmap, so nothing is copied up front."""

    def __init__(self, mm: mmap.mmap, start: int, size: int) -> None:
        self._mm, self._start, self._size, self._pos = mm, start, size, 0

    def read(self, n: int = -1) -> bytes:
        end = self._size if n < 0 else min(self._pos + n, self._size)
        data = self._mm[self._start + self._pos : self._start + end]
        self._pos = end
        return data

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._pos, os.SEEK_END: self._size}[whence]
        self._pos = base + offset
        return self._pos

    def tell(self) -> int:
        return self._pos

    def getvalue(self) -> bytes:
        return self._mm[self._start : self._start + self._size]


class DebugSections:
    """One ELF file's sections by name, their contents ready for DWARF parsing."""

    def __init__(self, path: Path, elf: Any, mm: mmap.mmap) -> None:
        self.path = path
        self.elf = elf  # pyelftools ELFFile
        self.mm = mm
        self.is_relocatable = elf.header.e_type == "ET_REL"
        self._order = "<" if elf.little_endian else ">"
        self._rela_for: dict[int, list[Any]] = {}
        self._symbols_cache: dict[int, list[int]] = {}
        if self.is_relocatable:
            for section in elf.iter_sections():
                if section.header.sh_type == "SHT_RELA":
                    self._rela_for.setdefault(section.header.sh_info, []).append(section)

    def descriptor(self, name: str):
        """pyelftools' view of the named section's final contents, or None when absent or NOBITS."""
        from elftools.dwarf.dwarfinfo import DebugSectionDescriptor  # here: pyelftools' DWARF costs ~18 ms to import (-X importtime); a warm run never loads it

        index = self._indices.get(name)
        if index is None:
            return None
        header = self.elf.get_section(index).header
        if header.sh_type == "SHT_NOBITS":
            return None
        address = self.layout.get(index, header.sh_addr)
        if not header.sh_flags & SHF_COMPRESSED and index not in self._rela_for:
            stream = MappedStream(self.mm, header.sh_offset, header.sh_size)
            # pyelftools reads any stream with read/seek/tell; it names IO[bytes]
            return DebugSectionDescriptor(stream, name, header.sh_offset, header.sh_size, address)  # type: ignore[arg-type]
        data = self._contents(index, header)
        if index in self._rela_for:  # copied to be patched only then: an inflated section is kept once
            patched = bytearray(data)
            for rela in self._rela_for[index]:
                self._relocate(patched, index, rela)
            data = bytes(patched)
        return DebugSectionDescriptor(io.BytesIO(data), name, header.sh_offset, len(data), address)

    @cached_property
    def _indices(self) -> dict[str, int]:
        found: dict[str, int] = {}
        for index, section in enumerate(self.elf.iter_sections()):
            found.setdefault(section.name, index)
        return found

    def _contents(self, index: int, header) -> bytes:
        raw = self.mm[header.sh_offset : header.sh_offset + header.sh_size]
        if not header.sh_flags & SHF_COMPRESSED:
            return raw
        return inflate(raw, self.elf.elfclass == 64, self._order, self.path, self.elf.get_section(index).name)

    # ---- relocation (ET_REL) ----

    @cached_property
    def layout(self) -> dict[int, int]:
        """section index -> address of each allocated section, laid out in header order (libdwfl's way)."""
        bases: dict[int, int] = {}
        if not self.is_relocatable:
            return bases
        end = 0
        for index, section in enumerate(self.elf.iter_sections()):
            header = section.header
            if index == 0 or not header.sh_flags & SHF_ALLOC:
                continue
            align = max(header.sh_addralign, 1)
            start = (end + align - 1) & -align
            bases[index] = start
            end = start + header.sh_size
        return bases

    def symbol_address(self, shndx: int, value: int) -> int:
        """A symbol's address: its value, plus its section's place in the layout for a relocatable file."""
        return value + self.layout.get(shndx, 0) if 0 < shndx < SHN_LORESERVE else value

    def _symbol_values(self, symtab_index: int) -> list[int]:
        cached = self._symbols_cache.get(symtab_index)
        if cached is None:
            header = self.elf.get_section(symtab_index).header
            table = SymbolTable(self.mm[header.sh_offset : header.sh_offset + header.sh_size], b"",
                                self.elf.elfclass == 64, self._order)
            cached = [self.symbol_address(shndx, value) if shndx != SHN_ABS else value
                      for _name, _info, _other, shndx, value, _size in table.rows()]
            self._symbols_cache[symtab_index] = cached
        return cached

    def _relocate(self, data: bytearray, target: int, rela) -> None:
        if self.elf.header.e_machine != "EM_X86_64" or self.elf.elfclass != 64:
            raise UserError(f"{self.path}: relocatable debug info for {self.elf.header.e_machine} is not supported",
                            "kprobe-tui reads x86-64 kernel modules")
        header = rela.header
        values = self._symbol_values(header.sh_link)
        place_base = self.layout.get(target, 0)
        entries = self.mm[header.sh_offset : header.sh_offset + header.sh_size]
        packers = {kind: (struct.Struct(self._order + form), pc_relative) for kind, (form, pc_relative) in R_X86_64.items()}
        for offset, info, addend in struct.iter_unpack(self._order + "QQq", entries):
            kind = info & 0xFFFFFFFF
            if kind == 0:
                continue
            packer = packers.get(kind)
            if packer is None:
                raise UserError(f"{self.path}: relocation type {kind} in {rela.name} is not handled",
                                "report it with the module's name")
            pack, pc_relative = packer
            value = values[info >> 32] + addend
            if pc_relative:
                value -= place_base + offset
            bits = pack.size * 8
            value &= (1 << bits) - 1
            if pack.format[-1] in "iq" and value >> (bits - 1):
                value -= 1 << bits
            pack.pack_into(data, offset, value)


def max_section_size() -> int:
    """The most bytes one compressed section may inflate to: KPROBE_TUI_MAX_SECTION_MB MiB, or the default."""
    text = os.environ.get(MAX_SECTION_ENV, "").strip()
    if not text:
        return DEFAULT_MAX_SECTION_MB << 20
    if not text.isdigit() or int(text) == 0:
        raise UserError(f"{MAX_SECTION_ENV}={text!r} is not a size in MiB",
                        f"set it to a whole number of MiB (the default is {DEFAULT_MAX_SECTION_MB}), or unset it")
    return int(text) << 20


def inflate(raw: bytes, is64: bool, order: str, path: Path, name: str) -> bytes:
    """The contents of an SHF_COMPRESSED section: its Elf_Chdr, then zlib or zstd data.

    Never more than the header's size plus one byte is inflated, and never a size above the bound."""
    if len(raw) < (24 if is64 else 12):
        raise UserError(f"{path}: section {name} is compressed but shorter than its compression header "
                        f"({len(raw)} bytes)", "the file is damaged: rebuild or reinstall it")
    if is64:
        kind, _reserved, size, _align = struct.unpack_from(order + "IIQQ", raw)
        body = raw[24:]
    else:
        kind, size, _align = struct.unpack_from(order + "III", raw)
        body = raw[12:]
    if kind not in (ELFCOMPRESS_ZLIB, ELFCOMPRESS_ZSTD):
        raise UserError(f"{path}: section {name} is compressed with an unknown method ({kind})",
                        f"decompress it: objcopy --decompress-debug-sections {path} OUT")
    bound = max_section_size()
    if size > bound:
        raise UserError(
            f"{path}: section {name} claims to inflate to {size} bytes, more than the {bound >> 20} MiB "
            "kprobe-tui inflates for one section",
            f"if the file is genuine, raise the bound: {MAX_SECTION_ENV}={-(-size >> 20)} (MiB) in the environment",
        )
    # one byte past the claim is enough to know the stream does not end where its header says
    if kind == ELFCOMPRESS_ZLIB:
        data = _zlib_decompress(body, size + 1, path, name)
    else:
        data = _zstd_decompress(body, size + 1, path, name)
    if len(data) != size:
        produced = f"more than {size}" if len(data) > size else f"only {len(data)}"
        raise UserError(f"{path}: section {name} inflates to {produced} bytes, its header says {size}",
                        "the file is damaged: rebuild or reinstall it")
    return data


def _zlib_decompress(body: bytes, limit: int, path: Path, name: str) -> bytes:
    inflater = zlib.decompressobj()
    try:
        data = inflater.decompress(body, limit)
    except zlib.error as exc:
        raise _not_compressed_data(path, name, "zlib", exc) from None
    if len(data) < limit and not inflater.eof:
        raise _not_compressed_data(path, name, "zlib", "the stream is cut short")
    return data


def _zstd_decompress(body: bytes, limit: int, path: Path, name: str) -> bytes:
    try:
        import zstandard  # only for zstd sections: Python 3.11 has no zstd of its own
    except ImportError:
        raise UserError(
            f"{path}: section {name} is zstd-compressed and the Python module zstandard is not installed",
            "pip install zstandard (Debian: apt-get install python3-zstandard), "
            f"or decompress the file: objcopy --decompress-debug-sections {path} OUT",
        ) from None
    # streamed: decompress() would allocate whatever size the frame header states; several frames
    # are read as one, as libelf's ZSTD_decompress does. In chunks: read(n) allocates n bytes before
    # it inflates any (1000 MiB for a 100-byte stream under a 1000 MiB claim).
    chunks: list[bytes] = []
    try:
        with zstandard.ZstdDecompressor().stream_reader(body, read_across_frames=True) as reader:
            while limit > 0 and (chunk := reader.read(min(limit, ZSTD_CHUNK))):
                chunks.append(chunk)
                limit -= len(chunk)
    except zstandard.ZstdError as exc:
        raise _not_compressed_data(path, name, "zstd", exc) from None
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _not_compressed_data(path: Path, name: str, method: str, detail: object) -> UserError:
    return UserError(f"{path}: section {name} is not valid {method} data ({detail})",
                     "the file is damaged: rebuild or reinstall it")
