"""Opening an ELF file's DWARF with pyelftools, fast enough for a 633 MB vmlinux.

pyelftools copies every debug section into memory and relocates them; on an ET_EXEC vmlinux the
relocations are already applied and the copy alone costs more than perf's whole run. So sections are
read through mmap (``sections.DebugSections``), and abbreviation tables are parsed with our own
decoder. pyelftools is imported here only when DWARF is first read: a warm query answered from the
per-build-id index never opens DWARF, and the import alone is ~20 ms.
"""

from __future__ import annotations

import mmap
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from kprobe_tui.debuginfo.leb128 import sleb128, uleb128
from kprobe_tui.debuginfo.sections import DebugSections

if TYPE_CHECKING:
    from elftools.dwarf.abbrevtable import AbbrevDecl, AbbrevTable
    from elftools.dwarf.dwarfinfo import DWARFInfo
    from elftools.elf.elffile import ELFFile

__all__ = ["open_dwarf"]

SECTION_NAMES = [".debug_info", ".debug_aranges", ".debug_abbrev", ".debug_frame", ".eh_frame", ".debug_str",
                 ".debug_loc", ".debug_ranges", ".debug_line", ".debug_pubtypes", ".debug_pubnames",
                 ".debug_addr", ".debug_str_offsets", ".debug_line_str", ".debug_loclists", ".debug_rnglists",
                 ".debug_sup", ".gnu_debugaltlink", ".debug_types"]


def open_dwarf(path: Path, supplementary: Path | None = None) -> tuple[Any, ELFFile, DWARFInfo, mmap.mmap]:
    """Open an ELF file's DWARF with mmap-backed sections (decompressed or relocated where they must be).

    ``supplementary``: the dwz alt file (.gnu_debugaltlink / .debug_sup) whose DIEs and strings
    DW_FORM_GNU_ref_alt/strp_alt (DWARF 5: ref_sup4/strp_sup) point into; locate found and checked it.
    """
    # here: pyelftools costs ~25 ms to import (-X importtime); a warm run from the index never opens DWARF
    from elftools.dwarf.dwarfinfo import DwarfConfig, DWARFInfo
    from elftools.elf.elffile import ELFFile  # (part of the ~25 ms above)

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
    # the layout of a relocatable file: symbols and CFI need it too (scope.py reads it back with getattr)
    dwarf.sections = sections  # type: ignore[attr-defined]  # an attribute of ours on pyelftools' DWARFInfo
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
    from elftools.dwarf.abbrevtable import AbbrevTable  # here: pyelftools costs ~10 ms+ to import (-X importtime); open_dwarf has loaded it

    section = dwarf.debug_abbrev_sec
    if section is None:
        return
    # our descriptors' streams (a MappedStream, or BytesIO for an inflated section) hold the whole section
    data = section.stream.getvalue()  # type: ignore[attr-defined]  # pyelftools names the stream IO[bytes]
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

    # pyelftools' method replaced by ours on this one DWARFInfo, the original kept beside it as functools does
    get_abbrev_table.__wrapped__ = original  # type: ignore[attr-defined]  # a function attribute
    dwarf.get_abbrev_table = get_abbrev_table  # type: ignore[method-assign]  # patched for speed (see docstring)


def _parse_abbrevs(data: bytes, pos: int) -> dict[int, AbbrevDecl]:
    from elftools.dwarf.abbrevtable import AbbrevDecl  # here: pyelftools costs ~10 ms+ to import (-X importtime); open_dwarf has loaded it

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
                value, pos = sleb128(data, pos)
            specs.append(_AttrSpec(ats.get(name, name), forms.get(form, form), value))
        # a plain dict answers AbbrevDecl's lookups by key as construct's Container does, without its cost
        table[code] = AbbrevDecl(code, {  # type: ignore[arg-type]
            "tag": tags.get(tag, tag),
            "children_flag": "DW_CHILDREN_yes" if children else "DW_CHILDREN_no",
            "attr_spec": specs,
        })


@cache
def _names_by_number() -> tuple[dict[int, str], dict[int, str], dict[int, str]]:
    """number -> name of DWARF tags, attributes and forms, as pyelftools spells them."""
    from elftools.dwarf.enums import ENUM_DW_AT, ENUM_DW_FORM, ENUM_DW_TAG  # here: ~9 ms to import (-X importtime), only when names are asked

    return tuple({v: k for k, v in enum.items() if isinstance(v, int)}  # type: ignore[return-value]
                 for enum in (ENUM_DW_TAG, ENUM_DW_AT, ENUM_DW_FORM))
