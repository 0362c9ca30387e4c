"""Where a variable is: its DW_AT_location as a single expression or a location list, at an address (perf's
dwarf_getlocation_addr)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kprobe_tui.debuginfo.dwarfinfo import Units


@dataclass
class LocationAt:
    """Where a variable is at one address."""

    ops: list[tuple[str, list]]
    range: tuple[int, int] | None  # the location-list entry, None for a single expression


def parse_ops(expr: list[int] | bytes, cu) -> list[tuple[str, list]]:
    from elftools.dwarf.dwarf_expr import DWARFExprParser  # here: pyelftools costs ~10 ms to import (-X importtime); a warm run never loads it

    parser = DWARFExprParser(cu.structs)
    return [(op.op_name, list(op.args)) for op in parser.parse_expr(expr)]


def location_entries(die, name: str, units: Units) -> list[int] | LocationList | None:
    """A location attribute: a single expression (bytes as ints) or [(low, high, expr), ...] (a tuple list)."""
    # here: pyelftools costs ~11 ms to import (-X importtime); a warm run never loads it
    from elftools.dwarf.locationlists import BaseAddressEntry, LocationEntry, LocationParser

    value = die.attributes.get(name)
    if value is None or value.form == "DW_FORM_loclistx":
        return None
    version = die.cu.header.version
    if not LocationParser.attribute_has_location(value, version):
        return None
    parsed = LocationParser(units.dwarf.location_lists()).parse_from_attribute(value, version, die)
    if not isinstance(parsed, list):
        return list(parsed.loc_expr)
    base = units.of(die.cu).base
    entries: list[tuple[int, int, list[int]]] = []
    for entry in parsed:
        if isinstance(entry, LocationEntry):
            offset = 0 if entry.is_absolute else base
            entries.append((offset + entry.begin_offset, offset + entry.end_offset, list(entry.loc_expr)))
        elif isinstance(entry, BaseAddressEntry):
            base = entry.base_address
    return LocationList(entries)


class LocationList(list[tuple[int, int, list[int]]]):
    """Entries of a location list (a list subclass, to tell it from a single expression)."""


def location_at(die, name: str, address: int, units: Units) -> LocationAt | None:
    """dwarf_getlocation_addr: the expression valid at an address, or None."""
    entries = location_entries(die, name, units)
    if entries is None:
        return None
    if not isinstance(entries, LocationList):
        return LocationAt(parse_ops(entries, die.cu), None)
    for low, high, expr in entries:
        if low <= address < high:
            return LocationAt(parse_ops(expr, die.cu), (low, high))
    return None


def location_ranges(die, units: Units) -> list[tuple[int, int]] | None:
    """Where DW_AT_location is defined (None: everywhere, a single expression)."""
    entries = location_entries(die, "DW_AT_location", units)
    if not isinstance(entries, LocationList):
        return None
    return [(low, high) for low, high, _ in entries]
