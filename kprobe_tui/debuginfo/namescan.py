"""Which compile units name a function: a scan of the section bytes, instead of a walk of every DIE.

perf looks for a function in every unit (debuginfo__find_probe_location), so a static inline from a
header (``read_cr3_pa``) is found in each unit that inlines it, and a static function defined in
several files (``audit_cb``) in each. The symbol table only knows units with an out-of-line copy, and
walking every unit's DIEs with pyelftools takes minutes on a vmlinux. But a unit that names the
function holds the name's offset in .debug_str (DW_FORM_strp: gcc puts every name of 4 bytes or more
there, merged across units), so a byte search of .debug_info for that offset finds the units in
~0.4 s on Debian's 174 MB .debug_info (a few ms on a library). A chance match of the 4 bytes only
costs a look at one more unit: the caller checks each unit's DIEs for the name.
"""

from __future__ import annotations

import bisect
import struct


def units_naming(dwarf, name: str) -> list[int]:
    """Offsets of the units (as CompileUnit.cu_offset) whose .debug_info refers to ``name`` as a string."""
    info = _Bytes(dwarf.debug_info_sec)
    if info.size == 0 or not name:
        return []
    encoded = name.encode(errors="surrogateescape") + b"\0"
    starts, offset_size = _unit_starts(info)
    patterns = [encoded] if len(encoded) <= offset_size else []  # short names may be stored inline (DW_FORM_string)
    for section in (dwarf.debug_str_sec, getattr(getattr(dwarf, "supplementary_dwarfinfo", None), "debug_str_sec", None)):
        strings = _Bytes(section)
        patterns += [at.to_bytes(offset_size, "little" if dwarf.config.little_endian else "big")
                     for at in strings.find_all(encoded)]  # a tail of a longer string is a valid strp target too
    found = set()
    for pattern in dict.fromkeys(patterns):
        for at in info.find_all(pattern):
            found.add(starts[bisect.bisect_right(starts, at) - 1])
    return sorted(found)


class _Bytes:
    """A section's bytes searched where they are: in the mapped file, or in memory when inflated or relocated."""

    def __init__(self, section) -> None:
        stream = section.stream if section is not None else None
        mapped = getattr(stream, "_mm", None) if stream is not None else None
        if stream is not None and mapped is not None:
            self.data, self.start, self.size = mapped, stream._start, stream._size  # noqa: SLF001  (our MappedStream)
        else:
            self.data = stream.getvalue() if stream is not None else b""
            self.start, self.size = 0, len(self.data)

    def find_all(self, pattern: bytes) -> list[int]:
        """Every offset (from the section's start) where ``pattern`` begins."""
        found, end = [], self.start + self.size
        at = self.data.find(pattern, self.start, end)
        while at >= 0:
            found.append(at - self.start)
            at = self.data.find(pattern, at + 1, end)
        return found

    def unpack(self, fmt: str, at: int) -> tuple:
        return struct.unpack_from(fmt, self.data, self.start + at)


def _unit_starts(info: _Bytes) -> tuple[list[int], int]:
    """Each unit's offset, from the unit headers' lengths; and the size of a string offset (4 or 8 bytes)."""
    starts, at, offset_size = [], 0, 4
    while at + 4 <= info.size:
        starts.append(at)
        (length,) = info.unpack("<I", at)
        if length == 0xFFFFFFFF:  # 64-bit DWARF
            (length,) = info.unpack("<Q", at + 4)
            offset_size, header = 8, 12
        else:
            header = 4
        if length == 0:
            break
        at += header + length
    return starts, offset_size
