"""The one ELF reader (kprobe_tui/elf.py) beside the five readers it replaced, on the same files in the same run.

Before issue 14 ELF symbols were read in five places, each its own way; their code is kept below as the
reference (as it was, trimmed to what it computed), so every figure has its "before" beside it:
  uprobe functions  compile.ElfSymbols: pyelftools' iter_symbols over .symtab and .dynsym, FUNC/IFUNC with
                    their file offsets             -> probes/symbols.ElfSymbols
  browser list      binary._read_function_symbols: pyelftools for the sections, struct for the tables
                                                   -> probes/binary._read_function_symbols
  DWARF by address  dwarfinfo.SymbolTable: pyelftools for the section, struct over the mmap (64-bit LE only),
                    then every name (what the index is built from) and 1000 lookups
                                                   -> debuginfo/symbols.FunctionSymbols
  kernel globals    compile._data_symbols: pyelftools' iter_symbols, STT_OBJECT, sorted
                                                   -> probes/symbols.data_symbols
  section table     locate.ElfSections: struct     -> locate.ElfSections over elf.ElfFile
Each figure is the best of --repeat runs (the machine is shared: the best is what the code costs, the rest
is others' load), before and after taking turns to go first, each after gc.collect(); "same" says whether
both give the same answer.

    python benchmarks/bench_elf.py [--repeat 5] [FILE ...]
(default: pyenv's libpython3.11 and the cached Debian debug vmlinux; on the vmlinux the readers built on
pyelftools' iter_symbols take seconds, so they are timed once there)
"""

from __future__ import annotations

import argparse
import bisect
import gc
import mmap
import struct
import time
from collections import defaultdict
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from kprobe_tui.debuginfo.locate import ElfSections
from kprobe_tui.debuginfo.symbols import FunctionSymbols
from kprobe_tui.elf import ElfFile
from kprobe_tui.files import open_regular
from kprobe_tui.probes import binary, symbols

DEFAULT = [Path.home() / ".pyenv/versions/3.11.7/lib/libpython3.11.so.1.0",
           Path("/var/cache/kprobe-tui/vmlinux-6.1.0-57-amd64")]


# --- the readers as they were (the reference) ---------------------------------------------------------

def old_uprobe_functions(path: Path) -> dict:
    from elftools.elf.elffile import ELFFile

    with open(path, "rb") as stream:
        elf = ELFFile(stream)
        segments = [(s["p_vaddr"], s["p_filesz"], s["p_offset"]) for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"]

        def file_offset(address):
            for vaddr, filesz, offset in segments:
                if vaddr <= address < vaddr + filesz:
                    return address - vaddr + offset
            raise ValueError(address)

        functions: dict[str, list] = {}
        for section_name in (".symtab", ".dynsym"):
            section = elf.get_section_by_name(section_name)
            if section is None:
                continue
            for sym in section.iter_symbols():
                if sym["st_info"]["type"] not in ("STT_FUNC", "STT_GNU_IFUNC") or not sym["st_value"]:
                    continue
                same = functions.setdefault(sym.name, [])
                if all(s[1] != sym["st_value"] for s in same):
                    same.append((sym.name, sym["st_value"], sym["st_size"], file_offset(sym["st_value"])))
    return functions


def old_browser_list(path: Path) -> dict:
    from elftools.elf.elffile import ELFFile

    found: dict = defaultdict(list)
    with open(path, "rb") as stream:
        elf = ELFFile(stream)
        sections = [section.name for section in elf.iter_sections()]
        order = "<" if elf.little_endian else ">"
        for table in (".symtab", ".dynsym"):
            section = elf.get_section_by_name(table)
            if section is None:
                continue
            strings = elf.get_section(section["sh_link"]).data()
            layout = order + ("IBBHQQ" if elf.elfclass == 64 else "IIIBBH")
            for row in struct.iter_unpack(layout, section.data()):
                name_at, info, _other, index, value, size = row if elf.elfclass == 64 else (row[0], row[3], row[4], row[5], row[1], row[2])
                kind = {2: "STT_FUNC", 10: "STT_GNU_IFUNC"}.get(info & 0xF)
                if kind is None or not name_at:
                    continue
                name = strings[name_at : strings.index(b"\0", name_at)].decode(errors="replace").split("@", 1)[0]
                same = found[name]
                if index == 0:
                    if not same:
                        same.append(binary._FunctionSymbol(0, 0, kind, ""))
                    continue
                where = sections[index] if index < len(sections) else "*ABS*"
                symbol = binary._FunctionSymbol(value, size, kind, where)
                if all(s.address != symbol.address or not s.section for s in same):
                    same[:] = [s for s in same if s.section] + [symbol]
    return dict(found)


class OldSymbolTable:
    def __init__(self, elf, mm) -> None:
        self._entries = []
        section = elf.get_section_by_name(".symtab") or elf.get_section_by_name(".dynsym")
        if section is None or section.header.sh_type == "SHT_NOBITS":
            return
        strtab = elf.get_section(section.header.sh_link)
        self._strtab = mm[strtab.header.sh_offset : strtab.header.sh_offset + strtab.header.sh_size]
        data = mm[section.header.sh_offset : section.header.sh_offset + section.header.sh_size]
        for st_name, st_info, _other, shndx, value, size in struct.iter_unpack("<IBBHQQ", data):
            if st_info & 0xF == 2 and shndx != 0 and value:
                self._entries.append((st_name, value, size))
        entries = sorted(self._entries, key=lambda e: e[1])
        self._by_address = [e[1] for e in entries], entries

    def containing(self, address):
        starts, entries = self._by_address
        i = bisect.bisect_right(starts, address) - 1
        while i >= 0:
            st_name, value, size = entries[i]
            if value <= address < value + max(size, 1):
                return self._strtab[st_name : self._strtab.index(b"\0", st_name)].decode(errors="replace"), value
            if value < address - (1 << 20):
                break
            i -= 1
        return None

    def names(self):
        for st_name, value, _ in self._entries:
            yield self._strtab[st_name : self._strtab.index(b"\0", st_name)].decode(errors="replace"), value


def old_dwarf_symbols(path: Path, probes: list[int]) -> tuple:
    from elftools.elf.elffile import ELFFile

    with open(path, "rb") as stream:
        mm = mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ)
        table = OldSymbolTable(ELFFile(stream), mm)
        return list(table.names()), [table.containing(address) for address in probes]


def old_data_symbols(path: Path) -> list:
    from elftools.elf.elffile import ELFFile

    with open(path, "rb") as stream:
        section = ELFFile(stream).get_section_by_name(".symtab")
        return sorted((sym["st_value"], sym["st_size"], sym.name) for sym in section.iter_symbols()
                      if sym["st_info"]["type"] == "STT_OBJECT" and sym["st_value"])


@dataclass(frozen=True)
class OldSection:
    type: int
    flags: int
    offset: int
    size: int
    align: int


def old_sections(path: Path) -> list:
    with open_regular(path, "ELF file") as stream:
        header = stream.read(64)
        order = "<" if header[5] == 1 else ">"
        if header[4] == 2:
            (shoff,) = struct.unpack_from(order + "Q", header, 0x28)
            entsize, count, names_index = struct.unpack_from(order + "HHH", header, 0x3A)
            entry = order + "IIQQQQIIQQ"
        else:
            (shoff,) = struct.unpack_from(order + "I", header, 0x20)
            entsize, count, names_index = struct.unpack_from(order + "HHH", header, 0x2E)
            entry = order + "IIIIIIIIII"
        stream.seek(shoff)
        first = stream.read(entsize)
        _, _, _, _, _, first_size, first_link, _, _, _ = struct.unpack_from(entry, first)
        count = count or first_size
        names_index = first_link if names_index == 0xFFFF else names_index
        table = first + stream.read(entsize * (count - 1))
        rows = [struct.unpack_from(entry, table, i * entsize) for i in range(count)]
        names_row = rows[names_index]
        stream.seek(names_row[4])
        names = stream.read(names_row[5])
    sections: dict = {}
    for name, kind, flags, _addr, offset, size, _link, _info, align, _entsize in rows:
        label = names[name : names.find(b"\0", name)].decode(errors="replace")
        sections.setdefault(label, OldSection(kind, flags, offset, size, align))
    return [(name, s.offset, s.size) for name, s in sections.items()]


# --- the same answers from the one reader --------------------------------------------------------------

def new_uprobe_functions(path: Path) -> dict:
    return {name: [(s.name, s.address, s.size, s.file_offset) for s in same]
            for name, same in symbols.ElfSymbols(path).functions.items()}


def new_dwarf_symbols(path: Path, probes: list[int]) -> tuple:
    with open(path, "rb") as stream:
        mm = mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ)
        table = FunctionSymbols(ElfFile(path, mm))
        found = [table.containing(address) for address in probes]
        return list(table.names()), [(s.name, s.address) if s else None for s in found]


def new_data_symbols(path: Path) -> list:
    symbols.data_symbols.cache_clear()
    return symbols.data_symbols(str(path))


def new_sections(path: Path) -> list:
    return [(name, s.offset, s.size) for name, s in ElfSections(path).sections.items()]


def timed(function, repeat: int):
    samples, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = function()
        samples.append(time.perf_counter() - start)
    return min(samples), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path, default=DEFAULT)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"{'reader':<18} {'file':<28} {'before':>10} {'after':>10} {'ratio':>7}  same")
    for path in args.files:
        if not path.exists():
            print(f"(skipped: {path} is not here)")
            continue
        big = path.stat().st_size > 200 << 20  # pyelftools' own symbol objects take seconds there: timed once
        starts = sorted(value for _, value in FunctionSymbols(ElfFile(path)).names())
        probes = [starts[i * len(starts) // 1000] + 1 for i in range(1000)] if starts else []
        cases = [("section table", partial(old_sections, path), partial(new_sections, path), False),
                 ("DWARF by address", partial(old_dwarf_symbols, path, probes), partial(new_dwarf_symbols, path, probes), False),
                 ("kernel globals", partial(old_data_symbols, path), partial(new_data_symbols, path), True),
                 ("uprobe functions", partial(old_uprobe_functions, path), partial(new_uprobe_functions, path), True),
                 ("browser list", partial(old_browser_list, path), partial(binary._read_function_symbols, path), False)]
        for label, old, new, slow in cases:
            before = after = float("inf")
            for turn in range(1 if big and slow else args.repeat):
                # alternate which goes first, each after a collection: else one pays for the other's garbage
                for which in ((0, 1) if turn % 2 == 0 else (1, 0)):
                    gc.collect()
                    if which == 0:
                        took, old_answer = timed(old, 1)
                        before = min(before, took)
                    else:
                        took, new_answer = timed(new, 1)
                        after = min(after, took)
            print(f"{label:<18} {path.name[:28]:<28} {before * 1000:8.1f}ms {after * 1000:8.1f}ms "
                  f"{after / before:6.2f}x  {'yes' if old_answer == new_answer else 'NO'}")


if __name__ == "__main__":
    main()
