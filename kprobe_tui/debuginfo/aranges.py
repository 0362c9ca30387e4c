"""address -> compile unit from .debug_aranges: the map every DWARF question by address starts from."""

from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass, field


@dataclass
class ArangeMap:
    """address -> CU offset from .debug_aranges, parsed with struct."""

    starts: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)
    cus: list[int] = field(default_factory=list)

    @classmethod
    def read(cls, data: bytes) -> ArangeMap:
        spans: list[tuple[int, int, int]] = []
        pos = 0
        while pos + 12 <= len(data):
            length, _version, cu_offset, address_size, _seg = struct.unpack_from("<IHIBB", data, pos)
            header = 12
            if length == 0xFFFFFFFF:
                break  # 64-bit DWARF aranges: not produced by gcc on x86-64
            end = pos + 4 + length
            entry = pos + header
            entry += (-entry) % (2 * address_size)
            while entry + 16 <= end:
                start, size = struct.unpack_from("<QQ", data, entry)
                entry += 16
                if start == 0 and size == 0:
                    break
                spans.append((start, start + size, cu_offset))
            pos = end
        return cls.of_spans(spans)

    @classmethod
    def of_spans(cls, spans: list[tuple[int, int, int]]) -> ArangeMap:
        """The map of (start, end, CU offset) spans, in any order."""
        spans = sorted(spans)
        return cls([s[0] for s in spans], [s[1] for s in spans], [s[2] for s in spans])

    def cu_at(self, address: int) -> int | None:
        i = bisect.bisect_right(self.starts, address) - 1
        if i >= 0 and address < self.ends[i]:
            return self.cus[i]
        return None
