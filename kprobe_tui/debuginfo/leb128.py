"""LEB128, DWARF's variable-length integers: abbreviation tables, line programs and location expressions use them."""

from __future__ import annotations

__all__ = ["uleb128"]


def uleb128(data: bytes, pos: int) -> tuple[int, int]:
    """(value, position after it) of the unsigned LEB128 number at ``pos``."""
    result = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def sleb128(data: bytes, pos: int) -> tuple[int, int]:
    """(value, position after it) of the signed LEB128 number at ``pos``."""
    result = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            if byte & 0x40:
                result -= 1 << shift
            return result, pos
