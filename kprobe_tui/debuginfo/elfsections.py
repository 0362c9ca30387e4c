"""An ELF file's sections by name, their contents inflated, and the notes that identify it (build-id,
debuglink, dwz altlink): what ``locate`` finds debug files by and ``debuginfod`` checks a download with.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

from kprobe_tui.debuginfo.sections import SHF_COMPRESSED, inflate
from kprobe_tui.elf import SHT_NOTE, ElfFile, Section

__all__ = ["ElfSections", "gnu_build_id"]

NT_GNU_BUILD_ID = 3


class ElfSections:
    """The named sections of an ELF file and their contents (the one ELF reader's, by name)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.elf = ElfFile(path)
        self.is64, self.order = self.elf.is64, self.elf.order
        self.sections: dict[str, Section] = {}
        for section in self.elf.sections:
            self.sections.setdefault(section.name, section)

    def data(self, name: str) -> bytes | None:
        """A section's contents (inflated when compressed), or None when absent or NOBITS."""
        section = self.sections.get(name)
        if section is None or not section.has_data:
            return None
        raw = self.elf.data(section)
        if section.flags & SHF_COMPRESSED:
            return inflate(raw, self.is64, self.order, self.path, name)
        return raw

    @property
    def has_dwarf(self) -> bool:
        section = self.sections.get(".debug_info")
        return section is not None and section.has_data

    def build_id(self) -> str | None:
        """The GNU build-id note, as lowercase hex."""
        for name, section in self.sections.items():
            if section.type == SHT_NOTE:
                found = gnu_build_id(self.data(name) or b"", self.order, 8 if section.align == 8 else 4)
                if found:
                    return found
        return None

    def debuglink(self) -> tuple[str, int] | None:
        """The .gnu_debuglink file name and CRC32."""
        data = self.data(".gnu_debuglink")
        if data is None:
            return None
        raw = data.split(b"\0", 1)[0]
        crc_at = (len(raw) + 1 + 3) & ~3
        if len(data) < crc_at + 4:
            return None
        return raw.decode(errors="replace"), struct.unpack_from(self.order + "I", data, crc_at)[0]

    def altlink(self) -> tuple[str, str] | None:
        """(file name, build-id) of the dwz supplementary file: .gnu_debugaltlink, or DWARF 5's .debug_sup."""
        data = self.data(".gnu_debugaltlink")
        if data is not None:
            name, _, build_id = data.partition(b"\0")
            return name.decode(errors="surrogateescape"), build_id.hex()
        data = self.data(".debug_sup")
        if data is not None and len(data) > 3 and data[2] == 0:  # version (2 bytes), is_supplementary
            name, _, rest = data[3:].partition(b"\0")
            size, shift, pos = 0, 0, 0
            while pos < len(rest):  # the checksum's ULEB128 length, then the checksum (the build-id)
                size |= (rest[pos] & 0x7F) << shift
                shift, pos = shift + 7, pos + 1
                if rest[pos - 1] < 0x80:
                    break
            return name.decode(errors="surrogateescape"), rest[pos : pos + size].hex()
        return None


def _iter_notes(data: bytes, order: str, align: int) -> Iterator[tuple[int, bytes, bytes]]:
    """(type, name, desc) of raw ELF notes."""
    pos = 0
    while pos + 12 <= len(data):
        namesz, descsz, ntype = struct.unpack_from(order + "III", data, pos)
        pos += 12
        name = data[pos : pos + namesz]
        pos += (namesz + align - 1) & -align
        desc = data[pos : pos + descsz]
        pos += (descsz + align - 1) & -align
        yield ntype, name, desc


def gnu_build_id(data: bytes, order: str, align: int) -> str | None:
    for ntype, name, desc in _iter_notes(data, order, align):
        if ntype == NT_GNU_BUILD_ID and name.rstrip(b"\0") == b"GNU":
            return desc.hex()
    return None
