"""Where a probe the kernel holds is, in perf's words: what ``perf probe -l`` prints after ``on``.

perf turns each kprobe_events/uprobe_events line back into a point (convert_to_perf_probe_point):
from the debug info when it has it (debuginfo__find_probe_point: ``tcp_recvmsg@net/ipv4/tcp.c``,
``work:3@/src/prog.c``), else from the symbols (``tcp_recvmsg+16``), else the place as written.
The same is done here with kprobe-tui's own readers; debug info is only what is on disk (never a
download for a listing).
"""

from __future__ import annotations

import bisect
import re
from functools import lru_cache
from pathlib import Path

from kprobe_tui.debuginfo import dwarfinfo as dw
from kprobe_tui.errors import UserError
from kprobe_tui.files import MiB, read_regular
from kprobe_tui.perfprobe.text import Point
from kprobe_tui.probes.symbols import elf_symbols

_KALLSYMS_TEXT = re.compile(r"^([0-9a-fA-F]+) [tTwW] (\S+)(?:[ \t]+\[([^\]\s]+)\])?[ \t]*$", re.M)
_KPROBE_PLACE = re.compile(r"(?:(?P<module>\w+):)?(?P<symbol>[A-Za-z_.][\w.]*)(?:\+(?P<offset>\d+|0x[0-9a-fA-F]+))?")


class Kallsyms:
    """The kernel's text symbols by name and by address (for the places probes name)."""

    def __init__(self, path: Path) -> None:
        text = read_regular(path, "kallsyms", 256 * MiB).decode(errors="replace")
        self.by_name: dict[tuple[str, str], int] = {}
        rows = []
        for address, name, module in _KALLSYMS_TEXT.findall(text):
            value = int(address, 16)
            self.by_name.setdefault((module, name), value)
            rows.append((value, name, module))
        rows.sort()
        self._starts = [row[0] for row in rows]
        self._rows = rows

    def address(self, name: str, module: str = "") -> int | None:
        return self.by_name.get((module, name))

    def containing(self, address: int) -> tuple[str, int, str] | None:
        """(name, start, module) of the symbol an address is in (the nearest one at or below it)."""
        i = bisect.bisect_right(self._starts, address) - 1
        if i < 0:
            return None
        start, name, module = self._rows[i]
        return name, start, module


def kernel_point(place: str, is_return: bool, kallsyms: Kallsyms | None, debuginfo) -> tuple[Point, str | None]:
    """(point, module) of a kprobe's place (``tcp_recvmsg+0``, ``_text+1234``, ``9p:v9fs_read+8``, ``0xADDR``)."""
    if place.startswith("0x"):
        return Point(place, is_return=is_return), None
    match = _KPROBE_PLACE.fullmatch(place)
    if match is None:
        return Point(place, is_return=is_return), None
    module, symbol = match["module"], match["symbol"]
    offset = int(match["offset"] or "0", 0)
    runtime = kallsyms.address(symbol, module or "") if kallsyms is not None else None
    if kallsyms is None or runtime is None:
        return Point(symbol, offset, is_return=is_return), module
    runtime += offset
    if debuginfo is not None and module is None:
        found = _dwarf_point(debuginfo, runtime - _kernel_slide(debuginfo, kallsyms), is_return)
        if found is not None:
            return found, None
    owner = kallsyms.containing(runtime)
    if owner is None:
        return Point(symbol, offset, is_return=is_return), module
    name, start, _ = owner
    return Point(name, runtime - start, is_return=is_return), module


def uprobe_point(place: str, is_return: bool, debuginfo_of) -> tuple[Point, str]:
    """(point, binary) of a uprobe's place (``/path:0xOFFSET``, perf's ``(0xREF)`` dropped)."""
    path, _, offset_text = re.sub(r"\(0x[0-9a-fA-F]+\)$", "", place).rpartition(":")
    try:
        offset = int(offset_text, 16)
    except ValueError:
        return Point(place, is_return=is_return), path
    address = offset + _text_bias(path)  # perf's get_text_start_address: .text's address - its file offset
    info = debuginfo_of(path)
    if info is not None:
        found = _dwarf_point(info, address, is_return)
        if found is not None:
            return found, path
    symbol = _elf_symbol(path, address)
    if symbol is not None:
        return Point(symbol[0], address - symbol[1], is_return=is_return), path
    return Point(f"0x{offset:x}", is_return=is_return), path


def _dwarf_point(info, address: int, is_return: bool) -> Point | None:
    """debuginfo__find_probe_point: the function, line (relative to the function's declaration or its
    inlined copy's), or offset, and the file, perf finds for an address; None outside the DWARF."""
    from kprobe_tui.debuginfo.lines import line_info  # here: ~6 ms to import (-X importtime); only a DWARF lookup needs it

    try:
        cu_offset = info.aranges.cu_at(address)
        if cu_offset is None:
            return None
        unit = info.units.of(info.cu(cu_offset))
        fname, lineno = line_info(info, unit, address)
        function = info.real_function_at(unit.cu, address)
        func = basefunc = None
        baseline, baseaddr = 0, 0
        if function is not None:
            func = basefunc = dw.linkage_name_of(function) or dw.name_of(function)
            entry = dw.entry_pc(function, info.units)
            # perf's baseaddr stays 0 when die_entrypc fails (real_function_at found it by its ranges: it does not)
            baseaddr = 0 if entry is None else entry
            baseline = dw.decl_line(function)
            if not func or entry is None or not baseline:
                lineno = 0
            else:
                fname = unit.file_name(dw.decl_file_index(function))
                if address == baseaddr:
                    lineno = baseline
                else:
                    scope = function
                    while True:
                        inline = dw.iter_tree(scope, lambda d: dw.FIND_END if d.tag == "DW_TAG_inlined_subroutine"
                                              and dw.has_pc(d, address, info.units) else dw.FIND_CONTINUE)
                        if inline is None:
                            break
                        if dw.entry_pc(inline, info.units) == address:
                            lineno = dw.int_attr(inline, "DW_AT_call_line", False) or 0
                            fname = unit.file_name(dw.int_attr(inline, "DW_AT_call_file", False))
                            break
                        name = dw.name_of(inline)
                        if not name or not dw.decl_line(inline):
                            break
                        func, baseline, scope = name, dw.decl_line(inline), inline
                    if unit.file_name(dw.decl_file_index(scope)) != fname:
                        lineno = 0
    except UserError:
        return None
    if lineno:
        return Point(func, line=lineno - baseline, is_return=is_return, file=fname)
    if basefunc:
        return Point(basefunc, address - baseaddr, is_return=is_return, file=fname)
    return Point(func, is_return=is_return, file=fname) if fname or func else None


def _kernel_slide(info, kallsyms: Kallsyms) -> int:
    """How far KASLR moved the kernel: _text in kallsyms against .text in the debug image (0 with nokaslr)."""
    section = info.elf.get_section_by_name(".text")
    text = kallsyms.address("_text")
    return text - section["sh_addr"] if section is not None and text is not None else 0


@lru_cache(maxsize=32)
def _text_bias(path: str) -> int:
    from elftools.elf.elffile import ELFFile  # here: pyelftools costs ~26 ms to import (-X importtime) and only this function uses it here

    try:
        with open(path, "rb") as stream:
            section = ELFFile(stream).get_section_by_name(".text")
            return section["sh_addr"] - section["sh_offset"] if section is not None else 0
    except Exception:  # a file gone or unreadable since it was probed: its offset is all there is
        return 0


def _elf_symbol(path: str, address: int) -> tuple[str, int] | None:
    try:
        symbol = elf_symbols(path).containing(address)
    except UserError:
        return None
    return (symbol.name, symbol.address) if symbol is not None else None
