"""Our fast decoders of line programs and abbreviation tables give what pyelftools' own give."""

from __future__ import annotations

from pathlib import Path

import pytest
from elftools.dwarf.abbrevtable import AbbrevTable

from kprobe_tui.debuginfo import locate
from kprobe_tui.debuginfo.lineprogram import decode_line_rows
from kprobe_tui.debuginfo.scope import open_debuginfo

LIBPYTHON = Path("/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0")


def sample_units(info, count: int):
    offsets = sorted(set(info.aranges.cus)) or [cu.cu_offset for cu in info.dwarf.iter_CUs()]
    step = max(len(offsets) // count, 1)
    return [info.cu(offset) for offset in offsets[::step][:count]]


def binaries(programs):
    yield from programs.values()
    if LIBPYTHON.exists():
        yield LIBPYTHON


def test_line_rows_equal_pyelftools(programs):
    checked = 0
    for binary in binaries(programs):
        info = open_debuginfo(binary=str(binary))
        for cu in sample_units(info, 6):
            program = info.units.of(cu).line_program
            expected = [
                (s.address, s.file, s.line, bool(s.is_stmt) and not s.end_sequence, bool(s.end_sequence))
                for s in (entry.state for entry in program.get_entries()) if s is not None
            ]
            # pyelftools clears is_stmt on end_sequence rows; elfutils (and we) keep the state's value
            ours = [(r.address, r.file, r.line, r.is_stmt and not r.end_sequence, r.end_sequence)
                    for r in decode_line_rows(program, cu.header.address_size)]
            assert ours == expected
            checked += 1
    assert checked >= 4


def test_abbrev_tables_equal_pyelftools(programs):
    for binary in binaries(programs):
        info = open_debuginfo(binary=str(binary))
        for cu in sample_units(info, 6):
            offset = cu["debug_abbrev_offset"]
            ours = info.dwarf.get_abbrev_table(offset)._abbrev_map
            theirs = AbbrevTable(info.dwarf.structs, info.dwarf.debug_abbrev_sec.stream, offset)._abbrev_map
            assert ours.keys() == theirs.keys()
            for code, decl in theirs.items():
                mine = ours[code]
                assert (mine["tag"], mine.has_children()) == (decl["tag"], decl.has_children())
                assert [(a.name, a.form, a.value) for a in mine["attr_spec"]] == [
                    (a.name, a.form, a.get("value")) for a in decl["attr_spec"]
                ]


@pytest.mark.parametrize("version", [4, 5])
def test_register_and_stack_locations_are_ops(programs, version):
    """The compiler's input: ops valid at the probe address, and the frame base."""
    info = open_debuginfo(binary=str(programs[("O0", version)]))
    point = info.probe_points("count_ready:8")[0]
    by_name = {v.name: v for v in point.variables}
    assert by_name["level"].location[0][0] == "DW_OP_fbreg" and by_name["level"].frame_base == [
        ("DW_OP_call_frame_cfa", [])
    ]
    assert by_name["list"].is_param and by_name["list"].type_name == "struct shape*"
    assert by_name["list"].type_die.tag == "DW_TAG_pointer_type"
    assert point.file_offset == point.address - _load_bias(programs[("O0", version)], point.address)


def _load_bias(binary: Path, address: int) -> int:
    from elftools.elf.elffile import ELFFile

    with open(binary, "rb") as stream:
        for segment in ELFFile(stream).iter_segments():
            h = segment.header
            if h.p_type == "PT_LOAD" and h.p_vaddr <= address < h.p_vaddr + h.p_memsz:
                return h.p_vaddr - h.p_offset
    raise AssertionError("address outside every PT_LOAD")


def test_elf_section_reader_equals_pyelftools(programs, tmp_path):
    """locate's struct reader (no pyelftools on a warm run) finds the same build-id, DWARF and debuglink."""
    import shutil
    import subprocess

    from elftools.elf.elffile import ELFFile

    stripped = tmp_path / "stripped"
    shutil.copy(programs[("O2", 5)], stripped)
    subprocess.run(["strip", "--only-keep-debug", "-o", str(tmp_path / "stripped.debug"), str(stripped)], check=True)
    subprocess.run(["strip", "--strip-debug", str(stripped)], check=True)
    subprocess.run(["objcopy", "--add-gnu-debuglink=stripped.debug", str(stripped)], cwd=tmp_path, check=True)
    for binary in [*binaries(programs), stripped, tmp_path / "stripped.debug", Path("/bin/ls")]:
        ours = locate.ElfSections(binary)
        with open(binary, "rb") as stream:
            elf = ELFFile(stream)
            notes = [n for s in elf.iter_sections() if s.header.sh_type == "SHT_NOTE" for n in s.iter_notes()]
            build_id = next((n["n_desc"] for n in notes if n["n_type"] == "NT_GNU_BUILD_ID"), None)
            info = elf.get_section_by_name(".debug_info")
            link = elf.get_section_by_name(".gnu_debuglink")
            assert ours.build_id() == build_id, binary
            assert ours.has_dwarf == (info is not None and info.header.sh_type != "SHT_NOBITS"), binary
            assert (ours.debuglink() or ("",))[0] == (link.data().split(b"\0")[0].decode() if link else ""), binary
            assert list(ours.sections) == [s.name for s in elf.iter_sections()], binary
    assert locate.ElfSections(stripped).debuglink()[0] == "stripped.debug"
    with pytest.raises(locate.NotElf):
        locate.ElfSections(Path(__file__))
