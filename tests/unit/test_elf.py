"""The one ELF reader against pyelftools on the four kinds of ELF file: 64- and 32-bit, little- and big-endian.

The little-endian files are compiled and linked here (gcc -m32 compiles; ld links without a 32-bit libc).
No toolchain here writes big-endian x86 files (objcopy cannot change a file's byte order), so each is
made from its little-endian twin by swapping every field of its headers and symbol tables: the same
file, said the other way round, which pyelftools reads as a big-endian one.
"""

from __future__ import annotations

import struct
import subprocess
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from kprobe_tui.elf import STT_FUNC, STT_OBJECT, ElfFile, NotElf, SymbolTable, identify

SOURCE = """int counter;
static int hidden = 3;
const char *names[] = {"a", "b"};
int work(int n) { return n + counter + hidden++; }
__attribute__((noinline)) static int helper(void) { return work(2); }
int entry(void) { return helper() + (int)names[1][0]; }
"""
HEADER = {64: "16sHHIQQQIHHHHHH", 32: "16sHHIIIIIHHHHHH"}
SECTION = {64: "IIQQQQIIQQ", 32: "IIIIIIIIII"}
SEGMENT = {64: "IIQQQQQQ", 32: "IIIIIIII"}
SYMBOL = {64: "IBBHQQ", 32: "IIIBBH"}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("elf")
    (out / "t.c").write_text(SOURCE)
    subprocess.run(["gcc", "-O1", "-g", "-c", "-o", str(out / "t64.o"), str(out / "t.c")], check=True)
    subprocess.run(["ld", "-e", "entry", "-o", str(out / "le64"), str(out / "t64.o")], check=True)
    built = {"le64": out / "le64", "le64.o": out / "t64.o"}
    if subprocess.run(["gcc", "-m32", "-O1", "-g", "-c", "-o", str(out / "t32.o"), str(out / "t.c")]).returncode == 0:
        subprocess.run(["ld", "-m", "elf_i386", "-e", "entry", "-o", str(out / "le32"), str(out / "t32.o")], check=True)
        built["le32"] = out / "le32"
    for name in list(built):
        swapped = out / name.replace("le", "be")
        swapped.write_bytes(byte_swapped(built[name].read_bytes()))
        built[swapped.name] = swapped
    return built


def byte_swapped(data: bytes) -> bytes:
    """A little-endian ELF file's headers and symbol tables rewritten big-endian (contents left alone)."""
    bits = 64 if data[4] == 2 else 32
    out = bytearray(data)

    def swap(layout: str, offset: int) -> tuple:
        fields = struct.unpack_from("<" + layout, data, offset)
        struct.pack_into(">" + layout, out, offset, *fields)
        return fields

    header = swap(HEADER[bits], 0)
    out[5] = 2  # ELFDATA2MSB
    phoff, shoff = header[5], header[6]
    phentsize, phnum, shentsize, shnum = header[9], header[10], header[11], header[12]
    for i in range(phnum):
        swap(SEGMENT[bits], phoff + i * phentsize)
    for i in range(shnum):
        section = swap(SECTION[bits], shoff + i * shentsize)
        if section[1] in (2, 11):  # SHT_SYMTAB, SHT_DYNSYM
            size = struct.calcsize("<" + SYMBOL[bits])
            for entry in range(section[5] // size):
                swap(SYMBOL[bits], section[4] + entry * size)
    return bytes(out)


def pyelftools_view(path: Path) -> tuple:
    with open(path, "rb") as stream:
        elf = ELFFile(stream)
        sections = [(s.name, s["sh_offset"], s["sh_size"], s["sh_addr"]) for s in elf.iter_sections()]
        segments = [(s["p_vaddr"], s["p_filesz"], s["p_memsz"], s["p_offset"]) for s in elf.iter_segments()
                    if s["p_type"] == "PT_LOAD"]
        table = elf.get_section_by_name(".symtab")
        symbols = [(s.name, s["st_value"], s["st_size"], s["st_shndx"] if isinstance(s["st_shndx"], int) else s["st_shndx"],
                    s["st_info"]["type"]) for s in table.iter_symbols()]
    return sections, segments, symbols


TYPES = {0: "STT_NOTYPE", 1: "STT_OBJECT", 2: "STT_FUNC", 3: "STT_SECTION", 4: "STT_FILE"}
SPECIAL = {0: "SHN_UNDEF", 0xFFF1: "SHN_ABS", 0xFFF2: "SHN_COMMON"}


def our_view(path: Path) -> tuple:
    elf = ElfFile(path)
    sections = [(s.name, s.offset, s.size, s.addr) for s in elf.sections]
    segments = [(s.vaddr, s.filesz, s.memsz, s.offset) for s in elf.load_segments()]
    table = elf.symbols(".symtab")
    symbols = [(table.name(name_at), value, size, SPECIAL.get(shndx, shndx), TYPES.get(info & 0xF, info & 0xF))
               for name_at, info, _other, shndx, value, size in table.rows()]
    return sections, segments, symbols


@pytest.mark.parametrize("name", ["le64", "le64.o", "le32", "be64", "be64.o", "be32"])
def test_sections_segments_and_symbols_are_what_pyelftools_reads(files, name):
    if name not in files:
        pytest.skip("gcc here cannot compile for 32-bit x86 (gcc -m32)")
    ours = our_view(files[name])
    assert ours == pyelftools_view(files[name])
    sections, segments, symbols = ours
    functions = {symbol[0] for symbol in symbols if symbol[4] == "STT_FUNC"}
    assert {"work", "helper", "entry"} <= functions
    assert {"counter", "hidden", "names"} <= {symbol[0] for symbol in symbols if symbol[4] == "STT_OBJECT"}
    assert bool(segments) == (not name.endswith(".o"))


def test_the_swapped_twin_reads_the_same(files):
    """What the byte order changes is only how numbers are spelled: every answer is the same."""
    for little in ("le64", "le64.o", "le32"):
        if little in files:
            big = files[little.replace("le", "be")]
            assert our_view(files[little]) == our_view(big)
            assert ElfFile(big).order == ">" and ElfFile(files[little]).order == "<"
            assert identify(big.read_bytes()[:20])[1:] == (2, 62 if "64" in little else 3)


def test_rows_filter_by_type(files):
    table = ElfFile(files["le64"]).symbols(".symtab")
    names = {table.name(row[0]) for row in table.of_types(STT_FUNC)}
    assert names >= {"work", "helper", "entry"} and "counter" not in names
    assert {table.name(row[0]) for row in table.of_types(STT_OBJECT)} == {"counter", "hidden", "names"}


@pytest.mark.parametrize("damage, why", [
    (lambda d: d[:40], "bad ELF magic"),  # a header cut short
    (lambda d: d[:0x28] + struct.pack("<Q", 1 << 40) + d[0x30:], "beyond the end of the file"),  # e_shoff
    (lambda d: d[:0x3A] + struct.pack("<H", 8) + d[0x3C:], "less than an ELF64 one"),  # e_shentsize
    (lambda d: d[:0x3C] + struct.pack("<H", 60000) + d[0x3E:], "cannot fit in the file"),  # e_shnum
    (lambda d: d[:0x3E] + struct.pack("<H", 9999) + d[0x40:], "section names are in section 9999"),  # e_shstrndx
])
def test_headers_that_lead_outside_the_file_are_not_elf(files, tmp_path, damage, why):
    path = tmp_path / "damaged"
    path.write_bytes(damage(files["le64"].read_bytes()))
    with pytest.raises(NotElf, match=why):
        ElfFile(path)


def test_a_symbol_table_beyond_the_file_is_not_elf(files, tmp_path):
    data = bytearray(files["le64"].read_bytes())
    elf = ElfFile(files["le64"])
    symtab = elf.section(".symtab")
    at = elf.header.shoff + symtab.number * elf.header.shentsize
    struct.pack_into("<Q", data, at + 0x20, 1 << 50)  # sh_size
    (tmp_path / "damaged").write_bytes(bytes(data))
    with pytest.raises(NotElf, match="beyond the end of the file"):
        ElfFile(tmp_path / "damaged").symbols(".symtab")


def test_names_without_their_nul_end_at_the_table_end():
    table = SymbolTable(b"", b"\0ab\0cd", True, "<")  # the last name's NUL cut off
    assert (table.name(1), table.name(4), table.name(5), table.name(99)) == ("ab", "cd", "d", "")
