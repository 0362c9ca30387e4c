"""Reading DWARF with pyelftools, fast enough for a 633 MB vmlinux, with perf's semantics.

pyelftools copies every debug section into memory and relocates them; on an ET_EXEC vmlinux the
relocations are already applied and the copy alone costs more than perf's whole run. So sections
are read through mmap, a CU is found by address (.debug_aranges) or by the name index, and only
the DIEs a question needs are parsed. The helpers mirror perf's dwarf-aux.c (elfutils semantics:
attributes integrate DW_AT_abstract_origin, file names are joined with their directory) so that
what we list equals what `perf probe` lists.

pyelftools is imported where DWARF is first read, not with this module: a warm query answered
from the per-build-id index never reads DWARF, and the import alone is ~20 ms.
"""

from __future__ import annotations

import bisect
import mmap
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache, cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from elftools.dwarf.abbrevtable import AbbrevDecl, AbbrevTable
    from elftools.dwarf.dwarfinfo import DWARFInfo
    from elftools.elf.elffile import ELFFile

HIGH_PC_ADDRESS_FORMS = {"DW_FORM_addr", "DW_FORM_addrx", "DW_FORM_addrx1", "DW_FORM_addrx2",
                         "DW_FORM_addrx3", "DW_FORM_addrx4"}
QUALIFIER_TAGS = {"DW_TAG_const_type", "DW_TAG_restrict_type", "DW_TAG_volatile_type", "DW_TAG_shared_type"}
SECTION_NAMES = [".debug_info", ".debug_aranges", ".debug_abbrev", ".debug_frame", ".eh_frame", ".debug_str",
                 ".debug_loc", ".debug_ranges", ".debug_line", ".debug_pubtypes", ".debug_pubnames",
                 ".debug_addr", ".debug_str_offsets", ".debug_line_str", ".debug_loclists", ".debug_rnglists",
                 ".debug_sup", ".gnu_debugaltlink", ".debug_types"]


def open_dwarf(path: Path, supplementary: Path | None = None) -> tuple[Any, ELFFile, DWARFInfo, mmap.mmap]:
    """Open an ELF file's DWARF with mmap-backed sections (decompressed or relocated where they must be).

    ``supplementary``: the dwz alt file (.gnu_debugaltlink / .debug_sup) whose DIEs and strings
    DW_FORM_GNU_ref_alt/strp_alt (DWARF 5: ref_sup4/strp_sup) point into; locate found and checked it.
    """
    from elftools.dwarf.dwarfinfo import DwarfConfig, DWARFInfo
    from elftools.elf.elffile import ELFFile

    from kprobe_tui.debuginfo.sections import DebugSections

    stream = open(path, "rb")  # noqa: SIM115  (kept open: the ELFFile and the mmap read it lazily)
    elf = ELFFile(stream)
    mm = mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ)
    if elf.get_section_by_name(".zdebug_info") is not None:  # pre-2012 GNU compression: pyelftools inflates it
        return stream, elf, elf.get_dwarf_info(relocate_dwarf_sections=False, follow_links=False), mm
    sections = DebugSections(path, elf, mm)
    descriptors = {name: sections.descriptor(name) for name in SECTION_NAMES}
    dwarf = DWARFInfo(
        config=DwarfConfig(little_endian=elf.little_endian, default_address_size=elf.elfclass // 8,
                           machine_arch=elf.get_machine_arch()),
        debug_info_sec=descriptors[".debug_info"], debug_aranges_sec=descriptors[".debug_aranges"],
        debug_abbrev_sec=descriptors[".debug_abbrev"], debug_frame_sec=descriptors[".debug_frame"],
        eh_frame_sec=descriptors[".eh_frame"], debug_str_sec=descriptors[".debug_str"],
        debug_loc_sec=descriptors[".debug_loc"], debug_ranges_sec=descriptors[".debug_ranges"],
        debug_line_sec=descriptors[".debug_line"], debug_pubtypes_sec=descriptors[".debug_pubtypes"],
        debug_pubnames_sec=descriptors[".debug_pubnames"], debug_addr_sec=descriptors[".debug_addr"],
        debug_str_offsets_sec=descriptors[".debug_str_offsets"],
        debug_line_str_sec=descriptors[".debug_line_str"], debug_loclists_sec=descriptors[".debug_loclists"],
        debug_rnglists_sec=descriptors[".debug_rnglists"], debug_sup_sec=descriptors[".debug_sup"],
        gnu_debugaltlink_sec=descriptors[".gnu_debugaltlink"], debug_types_sec=descriptors[".debug_types"],
    )
    dwarf.sections = sections  # the layout of a relocatable file: symbols and CFI need it too
    install_fast_abbrev_tables(dwarf)
    if supplementary is not None:
        dwarf.supplementary_dwarfinfo = open_dwarf(supplementary)[2]
    return stream, elf, dwarf, mm


class _AttrSpec(NamedTuple):
    name: str | int
    form: str | int
    value: int | None


def install_fast_abbrev_tables(dwarf: DWARFInfo) -> None:
    """Parse abbreviation tables with plain byte reads instead of construct (0.1 s per big kernel unit).

    The tables are what pyelftools' AbbrevTable holds (AbbrevDecl over a mapping), put in its
    own per-offset cache, so every DIE it parses afterwards uses them.
    """
    from elftools.dwarf.abbrevtable import AbbrevTable

    section = dwarf.debug_abbrev_sec
    if section is None:
        return
    data = section.stream.getvalue()
    original = dwarf.get_abbrev_table

    def get_abbrev_table(offset: int) -> AbbrevTable:
        cached = dwarf._abbrevtable_cache.get(offset)
        if cached is not None:
            return cached
        table = AbbrevTable.__new__(AbbrevTable)
        table.structs, table.stream, table.offset = dwarf.structs, section.stream, offset
        table._abbrev_map = _parse_abbrevs(data, offset)
        dwarf._abbrevtable_cache[offset] = table
        return table

    get_abbrev_table.__wrapped__ = original
    dwarf.get_abbrev_table = get_abbrev_table


def _parse_abbrevs(data: bytes, pos: int) -> dict[int, AbbrevDecl]:
    from elftools.dwarf.abbrevtable import AbbrevDecl

    tags, ats, forms = _names_by_number()
    table: dict[int, AbbrevDecl] = {}
    while True:
        code, pos = uleb128(data, pos)
        if code == 0:
            return table
        tag, pos = uleb128(data, pos)
        children = data[pos]
        pos += 1
        specs = []
        while True:
            name, pos = uleb128(data, pos)
            form, pos = uleb128(data, pos)
            if name == 0 and form == 0:
                break
            value = None
            if form == 0x21:  # DW_FORM_implicit_const
                value, pos = _sleb(data, pos)
            specs.append(_AttrSpec(ats.get(name, name), forms.get(form, form), value))
        table[code] = AbbrevDecl(code, {
            "tag": tags.get(tag, tag),
            "children_flag": "DW_CHILDREN_yes" if children else "DW_CHILDREN_no",
            "attr_spec": specs,
        })


@cache
def _names_by_number() -> tuple[dict[int, str], dict[int, str], dict[int, str]]:
    """number -> name of DWARF tags, attributes and forms, as pyelftools spells them."""
    from elftools.dwarf.enums import ENUM_DW_AT, ENUM_DW_FORM, ENUM_DW_TAG

    return tuple({v: k for k, v in enum.items() if isinstance(v, int)}  # type: ignore[return-value]
                 for enum in (ENUM_DW_TAG, ENUM_DW_AT, ENUM_DW_FORM))


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


class LineRow(NamedTuple):
    address: int
    file: int
    line: int
    is_stmt: bool
    end_sequence: bool
    prologue_end: bool = False  # DW_LNS_set_prologue_end (clang sets it; perf's prologue skip reads it)


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


def _sleb(data: bytes, pos: int) -> tuple[int, int]:
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


def decode_line_rows(program, address_size: int) -> list[LineRow]:
    """The rows of a DWARF line program: pyelftools' decoder is ~4x slower on a big kernel unit."""
    header = program.header
    stream = program.stream
    stream.seek(program.program_start_offset)
    data = stream.read(program.program_end_offset - program.program_start_offset)
    min_length = header["minimum_instruction_length"]
    default_is_stmt = bool(header["default_is_stmt"])
    line_base, line_range, opcode_base = header["line_base"], header["line_range"], header["opcode_base"]
    arg_counts = list(header["standard_opcode_lengths"])
    first_file = 1
    rows: list[LineRow] = []
    append = rows.append
    address, file, line, is_stmt, prologue_end = 0, first_file, 1, default_is_stmt, False
    pos, end = 0, len(data)
    while pos < end:
        op = data[pos]
        pos += 1
        if op >= opcode_base:
            adjusted = op - opcode_base
            address += (adjusted // line_range) * min_length
            line += line_base + adjusted % line_range
            append(LineRow(address, file, line, is_stmt, False, prologue_end))
            prologue_end = False
        elif op == 0:
            length, pos = uleb128(data, pos)
            sub = data[pos]
            if sub == 1:
                append(LineRow(address, file, line, is_stmt, True, prologue_end))
                address, file, line, is_stmt, prologue_end = 0, first_file, 1, default_is_stmt, False
            elif sub == 2:
                address = int.from_bytes(data[pos + 1 : pos + 1 + address_size], "little")
            pos += length
        elif op == 1:
            append(LineRow(address, file, line, is_stmt, False, prologue_end))
            prologue_end = False
        elif op == 2:
            advance, pos = uleb128(data, pos)
            address += advance * min_length
        elif op == 3:
            advance, pos = _sleb(data, pos)
            line += advance
        elif op == 4:
            file, pos = uleb128(data, pos)
        elif op == 6:
            is_stmt = not is_stmt
        elif op == 8:
            address += ((255 - opcode_base) // line_range) * min_length
        elif op == 9:
            address += int.from_bytes(data[pos : pos + 2], "little")
            pos += 2
        elif op == 10:
            prologue_end = True
        else:  # set_column, set_isa and unknown opcodes: skip their ULEB operands
            for _ in range(arg_counts[op - 1]):
                _, pos = uleb128(data, pos)
    return rows


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


def ranges_of(die, units: Units) -> list[tuple[int, int]]:
    """[low, high) address ranges of a DIE: low_pc/high_pc or DW_AT_ranges (DWARF4 and 5)."""
    from elftools.dwarf.ranges import RangeEntry

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
    return [r for r in result if r[0] < r[1]]


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


# ---- locations ---------------------------------------------------------------------------


@dataclass
class LocationAt:
    """Where a variable is at one address."""

    ops: list[tuple[str, list]]
    range: tuple[int, int] | None  # the location-list entry, None for a single expression


def parse_ops(expr: list[int] | bytes, cu) -> list[tuple[str, list]]:
    from elftools.dwarf.dwarf_expr import DWARFExprParser

    parser = DWARFExprParser(cu.structs)
    return [(op.op_name, list(op.args)) for op in parser.parse_expr(expr)]


def location_entries(die, name: str, units: Units) -> list[int] | list[tuple[int, int, list[int]]] | None:
    """A location attribute: a single expression (bytes as ints) or [(low, high, expr), ...] (a tuple list)."""
    from elftools.dwarf.locationlists import LocationEntry, LocationParser

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
        elif hasattr(entry, "base_address"):
            base = entry.base_address
    return LocationList(entries)


class LocationList(list):
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
        spans.sort()
        return cls([s[0] for s in spans], [s[1] for s in spans], [s[2] for s in spans])

    def cu_at(self, address: int) -> int | None:
        i = bisect.bisect_right(self.starts, address) - 1
        if i >= 0 and address < self.ends[i]:
            return self.cus[i]
        return None
