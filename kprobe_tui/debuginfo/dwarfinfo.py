"""DWARF's DIEs and compile units with perf's semantics: the helpers mirror perf's dwarf-aux.c (elfutils:
attributes integrate DW_AT_abstract_origin, file names are joined with their directory) so that what we
list equals what `perf probe` lists.

A CU is found by address (``aranges``) or by the name index, and only the DIEs a question needs are parsed.
The rest of the DWARF engine: ``dwarfopen`` (mmap-backed sections, fast abbreviation tables), ``lineprogram``
(line rows), ``locexpr`` (variable locations), ``leb128``.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING, Any

from kprobe_tui.debuginfo.lineprogram import LineRow, decode_line_rows

if TYPE_CHECKING:
    from elftools.dwarf.dwarfinfo import DWARFInfo

__all__ = ["FIND_CONTINUE", "FIND_END", "attr", "decl_file_index", "decl_line", "entry_pc", "has_pc", "int_attr",
           "is_func_instance", "iter_tree", "linkage_name_of", "name_of", "ranges_of", "ref", "strtailcmp",
           "type_name"]

HIGH_PC_ADDRESS_FORMS = {"DW_FORM_addr", "DW_FORM_addrx", "DW_FORM_addrx1", "DW_FORM_addrx2",
                         "DW_FORM_addrx3", "DW_FORM_addrx4"}
QUALIFIER_TAGS = {"DW_TAG_const_type", "DW_TAG_restrict_type", "DW_TAG_volatile_type", "DW_TAG_shared_type"}
# ---- DIE helpers (perf's dwarf-aux.c on elfutils) -------------------------------------------


def _owner(die, name: str, integrate: bool = True):
    """The DIE holding an attribute, following DW_AT_abstract_origin/DW_AT_specification like
    elfutils' dwarf_attr_integrate; None when no DIE on the chain has it."""
    for _ in range(16):
        if name in die.attributes:
            return die
        if not integrate:
            return None
        link = next((k for k in ("DW_AT_abstract_origin", "DW_AT_specification") if k in die.attributes), None)
        if link is None:
            return None
        die = die.get_DIE_from_attribute(link)
    return None


def attr(die, name: str, integrate: bool = True):
    """An attribute value (integrated through abstract origins), or None."""
    owner = _owner(die, name, integrate)
    return owner.attributes[name] if owner is not None else None


def ref(die, name: str, integrate: bool = True):
    """The DIE a reference attribute points to (integrated), or None."""
    owner = _owner(die, name, integrate)
    return owner.get_DIE_from_attribute(name) if owner is not None else None


def name_of(die) -> str | None:
    value = attr(die, "DW_AT_name")
    return value.value.decode(errors="replace") if value is not None else None


def linkage_name_of(die) -> str | None:
    value = attr(die, "DW_AT_linkage_name") or attr(die, "DW_AT_MIPS_linkage_name")
    return value.value.decode(errors="replace") if value is not None else None


def int_attr(die, name: str, integrate: bool = True) -> int | None:
    value = attr(die, name, integrate)
    return value.value if value is not None and isinstance(value.value, int) else None


class Units:
    """Per-CU data worth computing once: base address, file table, line rows."""

    def __init__(self, dwarf: DWARFInfo) -> None:
        self.dwarf = dwarf
        self._cache: dict[int, CUData] = {}

    def of(self, cu) -> CUData:
        data = self._cache.get(cu.cu_offset)
        if data is None:
            data = self._cache[cu.cu_offset] = CUData(self.dwarf, cu)
        return data


class CUData:
    """A compile unit with elfutils' view of its file names and sorted line rows."""

    def __init__(self, dwarf: DWARFInfo, cu) -> None:
        self.dwarf = dwarf
        self.cu = cu
        self.top = cu.get_top_DIE()
        self.version = cu.header.version
        low = self.top.attributes.get("DW_AT_low_pc")
        self.base = low.value if low is not None else 0
        comp_dir = self.top.attributes.get("DW_AT_comp_dir")
        self.comp_dir = comp_dir.value.decode(errors="replace") if comp_dir is not None else None

    @cached_property
    def line_program(self):
        return self.dwarf.line_program_for_CU(self.cu)

    @cached_property
    def files(self) -> list[str | None]:
        """File names by DW_AT_decl_file/row index, joined with their directory as elfutils does."""
        program = self.line_program
        if program is None:
            return []
        dirs = [d.decode(errors="replace") if isinstance(d, bytes) else d for d in program["include_directory"]]
        if self.version < 5:
            dirs = [self.comp_dir, *dirs]
        names: list[str | None] = [] if self.version >= 5 else [None]
        for entry in program["file_entry"]:
            name = entry.name.decode(errors="replace")
            directory = dirs[entry.dir_index] if entry.dir_index < len(dirs) else None
            names.append(name if name.startswith("/") or directory is None else f"{directory}/{name}")
        return names

    def file_name(self, index: int | None) -> str | None:
        if index is None or not 0 <= index < len(self.files):
            return None
        return self.files[index]

    @cached_property
    def rows(self) -> list[LineRow]:
        """Line rows sorted as elfutils sorts them: by address, end_sequence first, then table order."""
        program = self.line_program
        if program is None:
            return []
        rows = decode_line_rows(program, self.cu.header.address_size)
        order = sorted(range(len(rows)), key=lambda i: (rows[i].address, not rows[i].end_sequence, i))
        return [rows[i] for i in order]

    @cached_property
    def _row_addresses(self) -> list[int]:
        return [row.address for row in self.rows]

    def row_at(self, address: int) -> LineRow | None:
        """perf's cu_getsrc_die: the first row at the address's row address, then the first is_stmt one."""
        rows = self.rows
        if not rows:
            return None
        i = max(bisect.bisect_right(self._row_addresses, address) - 1, 0)
        while True:
            i -= 1
            if i < 0:
                return None
            if rows[i].address != address:
                break
        i += 1
        while i < len(rows):
            row = rows[i]
            if row.address > address:
                return None
            if row.is_stmt:
                return row
            i += 1
        return None

    def row_covering(self, address: int) -> LineRow | None:
        """addr2line's row: the last at or below the address, unless that one ends its sequence (a gap).
        Of the rows at one address the last is taken, as binutils keeps it (llvm-addr2line agrees on every
        97th address of libc 2.36's .text, gdb's ``info line`` on those checked by hand)."""
        index = bisect.bisect_right(self._row_addresses, address) - 1
        if index < 0 or self.rows[index].end_sequence:
            return None
        return self.rows[index]

    @cached_property
    def functions(self) -> list:
        """The subprogram DIEs dwarf_getfuncs visits in a C unit: not those nested in functions."""
        found = []

        def walk(parent):
            for child in parent.iter_children():
                if child.tag == "DW_TAG_subprogram":
                    found.append(child)
                elif child.tag in ("DW_TAG_namespace", "DW_TAG_lexical_block", "DW_TAG_module"):
                    walk(child)

        walk(self.top)
        return found


def ranges_of(die, units: Units, keep_empty: bool = False) -> list[tuple[int, int]]:
    """[low, high) address ranges of a DIE: low_pc/high_pc or DW_AT_ranges (DWARF4 and 5); ``keep_empty``:
    empty entries of DW_AT_ranges too, as elfutils' dwarf_ranges gives them (perf -V --range prints them)."""
    from elftools.dwarf.ranges import RangeEntry  # here: pyelftools' DWARF costs ~22 ms to import (-X importtime); a warm run from the index never loads it

    attrs = die.attributes
    low = attrs.get("DW_AT_low_pc")
    if low is not None and "DW_AT_high_pc" in attrs:
        high = attrs["DW_AT_high_pc"]
        end = high.value if high.form in HIGH_PC_ADDRESS_FORMS else low.value + high.value
        return [(low.value, end)]
    ranges = attrs.get("DW_AT_ranges")
    if ranges is None:
        return [(low.value, low.value + 1)] if low is not None else []
    cu = die.cu
    offset = ranges.value
    if ranges.form == "DW_FORM_rnglistx":
        offset = _rnglistx_offset(die, offset)
    lists = units.dwarf.range_lists()
    if lists is None:
        return []
    base = units.of(cu).base
    result = []
    for entry in lists.get_range_list_at_offset(offset, cu=cu):
        if isinstance(entry, RangeEntry):
            if entry.is_absolute:
                result.append((entry.begin_offset, entry.end_offset))
            else:
                result.append((base + entry.begin_offset, base + entry.end_offset))
        else:
            base = entry.base_address
    return result if keep_empty else [r for r in result if r[0] < r[1]]


def _rnglistx_offset(die, index: int) -> int:
    top = die.cu.get_top_DIE()
    base = top.attributes["DW_AT_rnglists_base"].value
    stream = die.dwarfinfo.debug_rnglists_sec.stream
    size = 8 if die.cu.structs.dwarf_format == 64 else 4
    stream.seek(base + index * size)
    return base + int.from_bytes(stream.read(size), "little")


def has_pc(die, address: int, units: Units) -> bool:
    return any(low <= address < high for low, high in ranges_of(die, units))


def entry_pc(die, units: Units) -> int | None:
    """perf's die_entrypc: DW_AT_entry_pc, DW_AT_low_pc, else the first range's start."""
    for name in ("DW_AT_entry_pc", "DW_AT_low_pc"):
        value = die.attributes.get(name)
        if value is not None:
            if name == "DW_AT_entry_pc" and value.form not in HIGH_PC_ADDRESS_FORMS:
                low = die.attributes.get("DW_AT_low_pc")
                return (low.value if low else units.of(die.cu).base) + value.value
            return value.value
    if "DW_AT_ranges" in die.attributes:
        ranges = ranges_of(die, units)
        return ranges[0][0] if ranges else None
    return None


def is_func_def(die) -> bool:
    """perf's die_is_func_def: a subprogram that is not a declaration, inline or with code."""
    if die.tag != "DW_TAG_subprogram" or "DW_AT_declaration" in die.attributes:
        return False
    attrs = die.attributes
    return ("DW_AT_inline" in attrs or "DW_AT_entry_pc" in attrs or "DW_AT_low_pc" in attrs
            or "DW_AT_ranges" in attrs)


def is_func_instance(die) -> bool:
    """perf's die_is_func_instance: a subprogram or inlined copy with an address."""
    if die.tag not in ("DW_TAG_subprogram", "DW_TAG_inlined_subroutine"):
        return False
    attrs = die.attributes
    return "DW_AT_entry_pc" in attrs or "DW_AT_low_pc" in attrs or "DW_AT_ranges" in attrs


def decl_file_index(die) -> int | None:
    return int_attr(die, "DW_AT_decl_file")


def decl_line(die) -> int:
    return int_attr(die, "DW_AT_decl_line") or 0


def iter_tree(die, visit: Callable[[Any], int]) -> Any:
    """perf's die_find_child: depth-first over the children; visit returns a FIND_* mask."""
    for child in die.iter_children():
        verdict = visit(child)
        if verdict == FIND_END:
            return child
        if verdict & FIND_CHILD and child.has_children:
            found = iter_tree(child, visit)
            if found is not None:
                return found
        if not verdict & FIND_SIBLING:
            return None
    return None


FIND_END, FIND_CHILD, FIND_SIBLING = 0, 1, 2
FIND_CONTINUE = FIND_CHILD | FIND_SIBLING


def unit_instances(bodies, units: Units) -> dict[int, list[int]]:
    """perf's die_walk_instances for every origin at once: concrete copies by abstract origin.

    Only function bodies are walked (types and declarations hold no code), in DIE order, so each
    list is in the order perf meets the copies.
    """
    found: dict[int, list[int]] = {}

    def visit(d):
        if is_func_instance(d) and "DW_AT_abstract_origin" in d.attributes:
            origin = d.get_DIE_from_attribute("DW_AT_abstract_origin")
            redundant = d.tag == "DW_TAG_inlined_subroutine" and (
                int_attr(d, "DW_AT_call_line", False) == decl_line(origin)
                and int_attr(d, "DW_AT_call_file", False) == decl_file_index(origin))
            if not redundant:  # perf skips a copy "called" from its own declaration line
                found.setdefault(origin.offset, []).append(d.offset)
        return FIND_CONTINUE

    for body in bodies:
        visit(body)
        iter_tree(body, visit)
    return found


def strtailcmp(a: str, b: str) -> bool:
    """perf's strtailcmp == 0: one path is a tail of the other."""
    n = min(len(a), len(b))
    return n == 0 or a[-n:] == b[-n:]


# ---- types, as perf spells them ---------------------------------------------------------


def real_type(die):
    """The type DIE of a variable with const/volatile/restrict dropped (typedefs kept), as perf."""
    current = ref(die, "DW_AT_type")
    while current is not None and current.tag in QUALIFIER_TAGS:
        current = ref(current, "DW_AT_type")
    return current


def type_name(die) -> str | None:
    """perf's die_get_typename: 'struct foo*', 'char*', '(function_type)'; None when unknown (void*)."""
    type_die = real_type(die)
    if type_die is None:
        return None
    tag = type_die.tag
    if tag in ("DW_TAG_array_type", "DW_TAG_pointer_type"):
        inner = type_name(type_die)
        return None if inner is None else inner + "*"  # perf 6.1: void pointers are "(unknown_type)"
    if tag == "DW_TAG_subroutine_type":
        return "(function_type)"
    prefix = {"DW_TAG_union_type": "union ", "DW_TAG_structure_type": "struct ",
              "DW_TAG_enumeration_type": "enum "}.get(tag, "")
    name = name_of(type_die)
    if name is None and not prefix:
        return None
    return f"{prefix}{name or ''}"


