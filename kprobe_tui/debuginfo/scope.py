"""Probe points and the variables in scope there (what `perf probe -V` lists).

This is the API the probe compiler and the TUI build on:

    info = open_debuginfo(binary="/usr/bin/prog")          # or vmlinux=...
    for site in info.function("main"): ...                  # out-of-line and inlined copies
    for point in info.probe_points("main:3"): point.address, point.variables

Variables carry their DWARF location at the probe address as a list of (op_name, args), the
function's frame base ops, and the pyelftools DIE/CU/DWARFInfo handles, so a compiler can turn
them into tracefs fetch-args without parsing DWARF again.
"""

from __future__ import annotations

import fnmatch
import re
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from kprobe_tui.blocking import blocking
from kprobe_tui.debuginfo import dwarfinfo as dw
from kprobe_tui.debuginfo.aranges import ArangeMap
from kprobe_tui.debuginfo.asking import one_question_at_a_time
from kprobe_tui.debuginfo.corrupt import register, reports_corruption
from kprobe_tui.debuginfo.dwarfopen import open_dwarf
from kprobe_tui.debuginfo.index import NameIndex, cache_key, file_identity
from kprobe_tui.debuginfo.lines import line_info, walk_lines
from kprobe_tui.debuginfo.locate import (
    LocatedDebugInfo,
    find_binary_debuginfo,
    find_vmlinux,
    source_path,
)
from kprobe_tui.debuginfo.locexpr import LocationList, location_at, location_entries, location_ranges
from kprobe_tui.debuginfo.modules import find_module_debuginfo
from kprobe_tui.debuginfo.namescan import units_naming
from kprobe_tui.debuginfo.symbols import FunctionSymbols
from kprobe_tui.elf import ElfFile
from kprobe_tui.errors import UserError

__all__ = ["DebugInfo", "PointSpec", "ProbePoint", "asking_about", "open_debuginfo"]

Op = tuple[str, list[Any]]


@dataclass
class FunctionSite:
    """One concrete copy of a function: the out-of-line body or one inlined instance."""

    name: str
    decl_file: str | None
    decl_line: int
    ranges: list[tuple[int, int]]  # [low, high) address ranges of this copy
    is_inline: bool
    die: Any  # pyelftools DIE: DW_TAG_subprogram or DW_TAG_inlined_subroutine
    cu: Any  # pyelftools CompileUnit
    call_file: str | None = None  # for inlined copies: where the call is
    call_line: int = 0

    @property
    def low_pc(self) -> int:
        return self.ranges[0][0] if self.ranges else 0


@dataclass
class Variable:
    """A parameter or local visible at a probe address, with where it lives there."""

    name: str
    is_param: bool
    type_die: Any  # pyelftools DIE of DW_AT_type (qualifiers kept), or None
    type_name: str  # perf's spelling: "struct shape*", "int", "(function_type)"
    location: list[Op] | None  # DWARF ops valid at the address; None when optimised out there
    frame_base: list[Op] | None  # the enclosing function's DW_AT_frame_base ops
    cu: Any
    dwarf: Any
    die: Any = None
    is_external: bool = False  # a global or static with a fixed address (DW_OP_addr)
    const_value: int | bytes | None = None  # DW_AT_const_value: no storage, the value itself
    location_range: tuple[int, int] | None = None  # the location-list entry covering the address
    listed_by_perf: bool = False  # perf probe -V shows it (perf only looks at the first op)
    located_here: bool = True  # False: a local located only later in the function (perf --range's [INV])
    in_unit: bool = False  # a global or static of the unit, listed for --externs (perf --range's [EXT])
    valid_in: list[tuple[int, int]] | None = None  # with ranges asked: where it has a location (perf --range)


@dataclass
class ProbePoint:
    """An address to probe, resolved from a spec, and the variables in scope there."""

    address: int  # the address perf would use (a virtual address in the ELF)
    file_offset: int | None  # for user binaries: what uprobe_events wants
    function: str  # the symbol the address belongs to (the out-of-line function)
    offset: int  # address - symbol address (perf's @<symbol+offset>)
    line: int  # absolute source line of the address
    file: str | None
    is_inline: bool  # the address is inside an inlined copy of the requested function
    is_return: bool = False
    variables: list[Variable] = field(default_factory=list)
    scope: str | None = None  # the function or inlined copy holding it, by name (perf names SRC;PTN events so)



# perf's default variable filter for -V
DEFAULT_FILTER = ("__k???tab_*", "__crc_*")
SUPPORTED_FIRST_OPS = re.compile(r"^DW_OP_(addr|fbreg|breg\d+|reg\d+|bregx|regx)$")
SPEC_RE = re.compile(r"^(?P<func>[A-Za-z_][\w.]*)(?:@(?P<file>[^:%]+))?(?::(?P<line>\d+))?(?P<ret>%return)?$")


@dataclass
class PointSpec:
    """FUNC[@FILE][:RLN][%return], perf's probe point syntax for a function."""

    function: str
    file: str | None = None
    line: int | None = None  # relative to the function's declaration line
    is_return: bool = False

    @classmethod
    def parse(cls, text: str) -> PointSpec:
        match = SPEC_RE.match(text)
        if not match or (match["line"] and match["ret"]):
            raise UserError(
                f"cannot parse probe point {text!r}",
                "use FUNC, FUNC:LINE (relative to the function's first line), FUNC%return or FUNC@FILE",
            )
        return cls(match["func"], match["file"], int(match["line"]) if match["line"] else None, bool(match["ret"]))

    def __str__(self) -> str:
        """perf's synthesize_perf_probe_point spelling, used in 'Available variables at ...'."""
        text = self.function + (f"@{self.file}" if self.file else "")
        if self.line is not None:
            text += f":{self.line}"
        return text + ("%return" if self.is_return else "")


def _debug_file(info, *_args, **_kwargs):
    return info.located.debug_file


_ASKED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # pyelftools DWARFInfo -> its DebugInfo


def asking_about(die) -> threading.RLock:
    """The lock of the DebugInfo that handed out ``die``: a DIE is read from long after the question
    that found it (a struct's members, when the tree expands), so hold it while reading through it."""
    info = _ASKED.get(die.dwarfinfo)
    return info.asking() if info is not None else threading.RLock()


class _answered_once:
    """A cached property computed under its DebugInfo's own lock. (Python 3.11's functools version
    takes a lock per attribute, shared by every instance, before ours: two files asked at once could
    deadlock.)"""

    def __init__(self, function: Callable) -> None:
        self.function = function
        self.__doc__ = function.__doc__

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def __get__(self, info, owner=None):
        if info is None:
            return self
        try:
            return info.__dict__[self.name]
        except KeyError:
            pass
        with info.asking():
            if self.name not in info.__dict__:
                info.__dict__[self.name] = self.function(info)
            return info.__dict__[self.name]


class DebugInfo:
    """One binary's (or the kernel's) DWARF, with the questions the probe builder asks of it.

    Its question methods (and lines.py's) are the engine's entry points: bytes that do not parse come
    out of them as CorruptDebugInfo naming the file (debuginfo/corrupt.py). pyelftools reads through
    shared stream positions, so the entry points answer one question at a time, each holding ``lock``
    (``asking``), whichever thread asks; ``open_debuginfo`` gives every caller of a file the same one."""

    def __init__(self, located: LocatedDebugInfo, source_dir: str | None = None, debuginfod=None) -> None:
        self.located = located
        self.source_dir = source_dir
        self.debuginfod = debuginfod  # a debuginfod.Client for source files not on disk (None: from the environment)
        self.lock = threading.RLock()  # re-entrant: entry points call each other

    def asking(self) -> threading.RLock:
        """``with info.asking():`` around anything that reads this file through the engine."""
        blocking(f"reading the debug info of {self.located.debug_file}")
        return self.lock

    @_answered_once
    def _opened(self):
        """(stream, ELFFile, DWARFInfo, mmap), on first use: a saved answer needs none of them."""
        opened = open_dwarf(self.located.debug_file, self.located.supplementary)
        register(opened[2], self.located.debug_file)
        _ASKED[opened[2]] = self
        return opened

    @property
    def elf(self):
        return self._opened[1]

    @property
    def dwarf(self):
        return self._opened[2]

    @property
    def _mm(self):
        return self._opened[3]

    @_answered_once
    def units(self) -> dw.Units:
        return dw.Units(self.dwarf)

    @property
    def is_kernel(self) -> bool:
        return self.located.is_kernel

    @_answered_once
    @reports_corruption(_debug_file)
    def symbols(self) -> FunctionSymbols:
        return FunctionSymbols(ElfFile(self.located.debug_file, self._mm), getattr(self.dwarf, "sections", None))

    @_answered_once
    @reports_corruption(_debug_file)
    def aranges(self) -> ArangeMap:
        section = self.dwarf.debug_aranges_sec  # relocated or inflated where the file needs it
        return ArangeMap.read(section.stream.getvalue()) if section is not None else ArangeMap()

    @_answered_once
    @reports_corruption(_debug_file)
    def index(self) -> NameIndex:
        key = cache_key(self.located.build_id, self.located.debug_file)

        def from_symbols():
            for name, address in self.symbols.names():
                cu = self.aranges.cu_at(address)
                if cu is not None:
                    yield name, cu

        return NameIndex.load_or_build(key, from_symbols, file_identity(self.located.debug_file))

    def _scan(self, name: str) -> bool:
        """Put every unit naming ``name`` in the index, once per name; True when this call did it."""
        if self.index.scanned(name):
            return False
        self.index.add_scanned(name, units_naming(self.dwarf, name))
        return True

    @one_question_at_a_time
    def cu(self, offset: int):
        return self.dwarf.get_CU_at(offset)

    # ---- functions ----

    @one_question_at_a_time
    @reports_corruption(_debug_file)
    def definitions(self, name: str, file: str | None = None) -> list:
        """Subprogram DIEs defining ``name`` (perf's die_match_name + die_is_func_def), in unit order."""
        found = self._definitions_in(self.index.cus(name), name, file)
        if not found and self._scan(name):  # a function that exists only inlined has no symbol
            found = self._definitions_in(self.index.cus(name), name, file)
        alias = None if found or file is not None else self.aliased(name)
        return self.definitions(alias) if alias else found

    def aliased(self, name: str) -> str | None:
        """The function DWARF describes at the address of a symbol it does not name (an alias: libc's ``puts``
        is ``_IO_puts``), as perf's find_alternative_probe_point finds it; None when there is none."""
        address = next((at for symbol, at in self.symbols.names() if symbol == name), None)
        cu_offset = self.aranges.cu_at(address) if address is not None else None
        if cu_offset is None:
            return None
        cu = self.cu(cu_offset)
        self._index_unit(self.units.of(cu))
        for low, high, die_offset in self.index.function_ranges(cu_offset):
            if low <= address < high:
                found = dw.name_of(cu.get_DIE_from_refaddr(die_offset))
                return found if found != name else None
        return None

    @reports_corruption(_debug_file)
    def definitions_in_every_unit(self, name: str, file: str | None = None) -> list:
        """The first definition of ``name`` in each unit that has one, in unit order: where perf looks for a
        probe point (debuginfo__find_probe_location; in a unit, dwarf_getfuncs stops at the first match).
        Units that only inline it count too (``read_cr3_pa`` in every file that calls it)."""
        self._scan(name)
        first: dict[int, Any] = {}
        found = self._definitions_in(self.index.cus(name), name, file)
        alias = None if found or file is not None else self.aliased(name)
        if alias:
            self._scan(alias)
            found = self._definitions_in(self.index.cus(alias), alias, file)
        for die in found:
            first.setdefault(die.cu.cu_offset, die)
        return list(first.values())

    def _definitions_in(self, cu_offsets: list[int], name: str, file: str | None) -> list:
        found = []
        for offset in cu_offsets:
            cu = self.cu(offset)
            unit = self.units.of(cu)
            self._index_unit(unit)
            for die_offset in self.index.function_dies(offset, name):
                die = cu.get_DIE_from_refaddr(die_offset)
                if file is not None:
                    decl = unit.file_name(dw.decl_file_index(die))
                    if not decl or not dw.strtailcmp(file, decl):
                        continue
                found.append(die)
        return found

    def _index_unit(self, unit: dw.CUData) -> None:
        """Record a unit's functions and their address ranges, once per build-id."""
        if self.index.knows_functions_of(unit.cu.cu_offset):
            return
        names: list[tuple[str, int]] = []
        ranges: list[tuple[int, int, int]] = []
        for die in unit.functions:
            # a DIE with a DW_AT_name of its own: name_of reads that one, never None
            name = dw.name_of(die) if dw.is_func_def(die) and "DW_AT_name" in die.attributes else None
            if name is not None:
                names.append((name, die.offset))
            ranges.extend((low, high, die.offset) for low, high in dw.ranges_of(die, self.units))
        self.index.add_functions(unit.cu.cu_offset, names, ranges)

    @one_question_at_a_time
    @reports_corruption(_debug_file)
    def function(self, name: str, file: str | None = None) -> list[FunctionSite]:
        """Every concrete copy of the first definition perf would pick: out-of-line and inlined."""
        definitions = self.definitions(name, file)
        if not definitions:
            raise UserError(f"function {name!r} not found in the debug info of {self.located.debug_file}",
                            "check the spelling; `kprobe-tui funcs` lists kernel functions")
        sites: list[FunctionSite] = []
        for die in definitions:
            copies = [die] if dw.is_func_instance(die) else self.instances_of(die)
            sites.extend(self._site(copy, name) for copy in copies)
            if sites:
                break
        return sites

    def _site(self, die, name: str) -> FunctionSite:
        unit = self.units.of(die.cu)
        inline = die.tag == "DW_TAG_inlined_subroutine"
        return FunctionSite(
            name=name,
            decl_file=unit.file_name(dw.decl_file_index(die)),
            decl_line=dw.decl_line(die),
            ranges=dw.ranges_of(die, self.units),
            is_inline=inline,
            die=die,
            cu=die.cu,
            call_file=unit.file_name(dw.int_attr(die, "DW_AT_call_file", False)) if inline else None,
            call_line=(dw.int_attr(die, "DW_AT_call_line", False) or 0) if inline else 0,
        )

    @one_question_at_a_time
    def instances_of(self, origin) -> list:
        """The concrete copies (out-of-line and inlined) of an abstract function, as perf walks them."""
        cu = origin.cu
        origins = self.index.instances(cu.cu_offset)
        if origins is None:
            self._index_unit(self.units.of(cu))
            bodies = dict.fromkeys(offset for _, _, offset in self.index.function_ranges(cu.cu_offset))
            origins = dw.unit_instances([cu.get_DIE_from_refaddr(offset) for offset in bodies], self.units)
            self.index.add_instances(cu.cu_offset, origins)
        return [cu.get_DIE_from_refaddr(offset) for offset in origins.get(origin.offset, [])]

    @one_question_at_a_time
    def real_function_at(self, cu, address: int):
        """perf's die_find_realfunc: the unit's first subprogram whose ranges hold the address."""
        self._index_unit(self.units.of(cu))
        for low, high, die_offset in self.index.function_ranges(cu.cu_offset):
            if low <= address < high:
                return cu.get_DIE_from_refaddr(die_offset)
        return None

    @one_question_at_a_time
    @reports_corruption(_debug_file)
    def source_line(self, address: int) -> tuple[str, int] | None:
        """(file, line) of an address as addr2line gives them (the line-table row covering it, the file as
        DWARF joins it with its directory); None where no unit or row covers it, or the row's line is 0 (code
        of no line, addr2line's ``?``) or beyond 32 bits (a corrupt table: DWARF's line register is 32-bit)."""
        unit = self._unit_at(address)
        return _row_line(unit, address) if unit is not None else None

    @one_question_at_a_time
    @reports_corruption(_debug_file)
    def source_frames(self, address: int) -> list[tuple[str | None, tuple[str, int]]]:
        """``addr2line -i -f``, outermost first: (None, where the real function calls its outermost inlined
        copy), then each inlined copy's name and where it calls the next one, the innermost at ``source_line``.
        [] where source_line has nothing."""
        unit = self._unit_at(address)
        innermost = _row_line(unit, address) if unit is not None else None
        if unit is None or innermost is None:
            return []
        inlined = self._scopes_at(unit, address)[1:]
        names = [None, *(dw.name_of(die) or "??" for die in inlined)]
        calls = [(unit.file_name(dw.int_attr(die, "DW_AT_call_file", False)) or "??",
                  dw.int_attr(die, "DW_AT_call_line", False) or 0) for die in inlined]
        return list(zip(names, [*calls, innermost]))

    def _unit_at(self, address: int) -> dw.CUData | None:
        cu_offset = (self.aranges if self.aranges.starts else self._unit_ranges).cu_at(address)
        return self.units.of(self.cu(cu_offset)) if cu_offset is not None else None

    @_answered_once
    def _unit_ranges(self) -> ArangeMap:
        """address -> CU from each unit's own ranges, for a file without .debug_aranges (clang emits none
        unless asked with -gdwarf-aranges), as elfutils' dwarf_addrdie falls back to them."""
        spans: list[tuple[int, int, int]] = []
        for cu in self.dwarf.iter_CUs():
            spans.extend((low, high, cu.cu_offset) for low, high in dw.ranges_of(cu.get_top_DIE(), self.units))
        return ArangeMap.of_spans(spans)

    @_answered_once
    def _load_segments(self) -> list[tuple[int, int, int]]:
        """(vaddr, memsz, offset) of the probed binary's PT_LOAD segments (not the debug file's)."""
        # file_offset, the one caller, returns before this for the kernel, the only one without a binary
        assert self.located.binary is not None, "a user binary's debug info has a binary"
        return [(s.vaddr, s.memsz, s.offset) for s in ElfFile(self.located.binary).load_segments()]

    @one_question_at_a_time
    def file_offset(self, address: int) -> int | None:
        """The file offset of a virtual address in the probed binary (what uprobe_events takes)."""
        if self.is_kernel:
            return None
        for vaddr, size, offset in self._load_segments:
            if vaddr <= address < vaddr + size:
                return address - vaddr + offset
        return None

    @one_question_at_a_time
    def source_file(self, raw_path: str, cu) -> str | None:
        """The readable source text for a DWARF file name, resolved as perf does (-s as prefix)."""
        return source_path(raw_path, self.units.of(cu).comp_dir, self.source_dir)

    # ---- probe points and variables ----

    @one_question_at_a_time
    @reports_corruption(_debug_file)
    def probe_points(self, spec: str | PointSpec, externs: bool = False, ranges: bool = False) -> list[ProbePoint]:
        """The addresses perf probe would use for a spec, each with the variables perf -V lists (``ranges``:
        as -V --range lists them, with where in the function each has a location)."""
        spec = spec if isinstance(spec, PointSpec) else PointSpec.parse(spec)
        definitions = self.definitions_in_every_unit(spec.function, spec.file)
        if not definitions:
            raise UserError(f"function {spec.function!r} not found in the debug info of {self.located.debug_file}",
                            "check the spelling, or give FUNC@FILE for a static function")
        points: list[ProbePoint] = []
        for die in definitions:  # every unit's: perf probes a static function of each file, each inlining unit
            points += self._points_of(die, spec, externs, ranges)
        if spec.is_return:
            points = [p for p in points if not p.is_inline]
        unique: dict[int, ProbePoint] = {}
        for point in points:  # perf lists an address once, even when two inlined copies start there
            unique.setdefault(point.address, point)
        return list(unique.values())

    @one_question_at_a_time
    @reports_corruption(_debug_file)
    def lazy_points(self, function: str | None, file: str | None, lines: Collection[int],
                    externs: bool = False) -> list[ProbePoint]:
        """perf's ;PTN (find_probe_point_lazy): every address where one of ``lines`` starts, walked as
        die_walk_lines walks FUNC's definitions and inlined copies, or with no function every unit
        holding ``file``; an address once, the first line found there. Unlike FUNC:RLN, a line
        sharing its address with another (the function's entry) is kept: perf probes it."""
        walks: list[tuple[dw.CUData, Any, str | None]] = []
        if function is None:
            for cu in self.dwarf.iter_CUs():  # perf's find_probes: each unit whose line table names the file
                unit = self.units.of(cu)
                walks.append((unit, None, next((f for f in unit.files if f and file and dw.strtailcmp(file, f)), None)))
        else:
            for die in self.definitions_in_every_unit(function, file):
                unit = self.units.of(die.cu)
                fname = unit.file_name(dw.decl_file_index(die))
                walks += [(unit, scope, fname) for scope in ([die] if dw.is_func_instance(die) else self.instances_of(die))]
        found: dict[int, ProbePoint] = {}
        for unit, scope, fname in walks:
            if fname is None:
                continue
            for name, line, address in walk_lines(self, unit, scope):
                if line not in lines or address in found or not name or not dw.strtailcmp(name, fname):
                    continue
                best = self._best_scope(unit, address, function, fname) if function else self._nearest_scope(unit, address, fname, line)
                if best is None:
                    raise UserError(f"{fname}:{line}: no function holds this line", "probe FUNC;PATTERN instead")
                found[address] = self._point(best, address, PointSpec(function or dw.name_of(best) or ""), line, fname, externs)
        return list(found.values())

    def _nearest_scope(self, unit: dw.CUData, address: int, file: str, line: int):
        """perf's find_best_scope with no function: of the function and inlined copies at the address
        declared in ``file``, the one declared nearest above the line."""
        best, distance = None, None
        for candidate in self._scopes_at(unit, address):
            declared = dw.decl_line(candidate)
            if unit.file_name(dw.decl_file_index(candidate)) == file and declared < line and (distance is None or line - declared < distance):
                best, distance = candidate, line - declared
        return best

    def _points_of(self, die, spec: PointSpec, externs: bool, ranges: bool) -> list[ProbePoint]:
        """perf's probe_point_search_cb on one unit's definition: a line in it, its entry, or the entries
        of its concrete copies (out-of-line and inlined) when it is an abstract inline function."""
        unit = self.units.of(die.cu)
        decl_file = unit.file_name(dw.decl_file_index(die))
        points: list[ProbePoint] = []
        if spec.line is not None:
            target = dw.decl_line(die) + spec.line
            for address in _line_addresses(self, unit, decl_file, target):
                self._check_line_owns(unit, spec, decl_file, target, address)
                scope = self._best_scope(unit, address, spec.function, decl_file)
                if scope is not None:
                    points.append(self._point(scope, address, spec, target, decl_file, externs, ranges))
        elif dw.is_func_instance(die):
            entry = dw.entry_pc(die, self.units)
            if entry:
                points.append(self._point(die, entry, spec, dw.decl_line(die), decl_file, externs, ranges))
        else:
            for instance in self.instances_of(die):
                entry = dw.entry_pc(instance, self.units)
                if entry:
                    points.append(self._point(instance, entry, spec, dw.decl_line(die), decl_file, externs, ranges))
        return points

    def _check_line_owns(self, unit: dw.CUData, spec: PointSpec, file: str, line: int, address: int) -> None:
        """perf's verify_representive_line: refuse a line whose address maps back to another line."""
        back_file, back_line = line_info(self, unit, address)
        if not back_file or not back_line or back_file != file or back_line == line:
            return
        where = f"{back_file}:{back_line}"
        scope = self._best_scope(unit, address, spec.function, file)
        if scope is not None and _matches(scope, spec.function):
            where = f"{dw.name_of(scope)}:{back_line - dw.decl_line(scope)}"
        raise UserError(f"{spec}: this line shares its address with other lines",
                        f"probe at {where} instead")

    def _best_scope(self, unit: dw.CUData, address: int, function: str, decl_file: str | None):
        """perf's find_best_scope: the outermost function or inlined copy at the address named as asked; else
        (a line of another function inlined there) the real function, as its find_inner_scope_cb takes the
        first scope cu_walk_functions_at visits: -V then lists the real function's variables too."""
        chain = self._scopes_at(unit, address)
        for candidate in chain:
            file = unit.file_name(dw.decl_file_index(candidate))
            if decl_file and file != decl_file:
                continue
            if _matches(candidate, function):
                return candidate
        return chain[0] if chain else None

    def _scopes_at(self, unit: dw.CUData, address: int) -> list:
        """perf's cu_walk_functions_at: the real function at the address, then each inlined copy in it, outermost first."""
        scope = self.real_function_at(unit.cu, address)
        chain = []
        while scope is not None:
            chain.append(scope)
            scope = dw.iter_tree(scope, lambda d: dw.FIND_END if d.tag == "DW_TAG_inlined_subroutine"
                                 and dw.has_pc(d, address, self.units) else dw.FIND_CONTINUE)
        return chain

    def _point(self, scope, address: int, spec: PointSpec, line: int, file: str | None, externs: bool,
               ranges: bool = False) -> ProbePoint:
        function = scope if dw.is_func_def(scope) else self.real_function_at(scope.cu, address)
        entry = dw.entry_pc(function, self.units) if function is not None else None
        if function is not None and entry is not None:
            symbol, offset = dw.name_of(function) or spec.function, address - entry
        else:
            sym = self.symbols.containing(address)
            symbol, offset = (sym.name, address - sym.address) if sym else (spec.function, 0)
        point = ProbePoint(
            address=address,
            file_offset=self.file_offset(address),
            function=symbol,
            offset=offset,
            line=line,
            file=file,
            is_inline=scope.tag == "DW_TAG_inlined_subroutine",
            is_return=spec.is_return,
            scope=dw.name_of(scope),
        )
        if function is not None:
            point.variables = self.variables_at(scope, function, address, externs, ranges)
        return point

    @one_question_at_a_time
    def variables_at(self, scope, function, address: int, externs: bool = False, ranges: bool = False) -> list[Variable]:
        """Parameters and locals visible at an address (perf's collect_variables_cb), listed or not;
        ``ranges``: also locals located only later in the function, and where each has a location."""
        frame = location_at(function, "DW_AT_frame_base", address, self.units)
        frame_base = frame.ops if frame else None
        entry = dw.entry_pc(function, self.units)
        found: list[Variable] = []

        def visit(die):
            if die.tag in ("DW_TAG_formal_parameter", "DW_TAG_variable"):
                found.append(self._variable(die, address, frame_base, function, entry, ranges))
            return dw.FIND_CONTINUE if dw.has_pc(die, address, self.units) else dw.FIND_SIBLING

        dw.iter_tree(scope, visit)
        if externs:
            for die in die_children(scope.cu.get_top_DIE()):
                if die.tag in ("DW_TAG_formal_parameter", "DW_TAG_variable"):
                    found.append(self._variable(die, address, frame_base, function, entry))
                    found[-1].in_unit = True
        return found

    def _variable(self, die, address: int, frame_base, function, entry, ranges: bool = False) -> Variable:
        name = dw.name_of(die) or "(anonymous)"
        type_die = dw.ref(die, "DW_AT_type")
        spelled = dw.type_name(die)
        variable = Variable(
            name=name, is_param=die.tag == "DW_TAG_formal_parameter", type_die=type_die,
            type_name=spelled if spelled is not None else "(unknown_type)", location=None,
            frame_base=frame_base, cu=die.cu, dwarf=self.dwarf, die=die,
        )
        if "DW_AT_external" in die.attributes:
            variable.is_external = True
            found = location_at(die, "DW_AT_location", address, self.units)
            variable.location = found.ops if found else None
            variable.listed_by_perf = True
        elif "DW_AT_const_value" in die.attributes:  # perf reads it without following abstract_origin
            variable.const_value = die.attributes["DW_AT_const_value"].value
            variable.listed_by_perf = True
        else:
            found = location_at(die, "DW_AT_location", address, self.units)
            if found is None and variable.is_param and address == entry:
                found = self._first_location_after(die, function, address)
            elif found is None and ranges and not variable.is_param:
                # perf's -ERANGE: with --range, a local located later in the function is listed as [INV]
                found = self._first_location_after(die, function, address)
                variable.located_here = False
            if found is not None and found.ops:
                if variable.located_here:
                    variable.location, variable.location_range = found.ops, found.range
                first = found.ops[0][0]
                variable.is_external = first == "DW_OP_addr"
                variable.listed_by_perf = bool(SUPPORTED_FIRST_OPS.match(first)) and (
                    first != "DW_OP_fbreg" or frame_base is not None)
        variable.listed_by_perf = variable.listed_by_perf and not any(
            fnmatch.fnmatchcase(name, pattern) for pattern in DEFAULT_FILTER)
        if ranges:
            variable.valid_in = self._valid_ranges(die)
        return variable

    def _valid_ranges(self, die) -> list[tuple[int, int]] | None:
        """perf's die_get_var_range: the entries of the variable's own location list, in order, empty ones
        too; for a single expression, the ranges of the scope that declares it. None without a
        DW_AT_location of its own (a constant, a declaration): perf then leaves the variable out."""
        entries = location_entries(die, "DW_AT_location", self.units)
        if entries is None:
            return None
        if isinstance(entries, LocationList):
            return [(low, high) for low, high, _ in entries]
        parent = die.get_parent()
        return dw.ranges_of(parent, self.units, keep_empty=True) if parent is not None else None

    def _first_location_after(self, die, function, address: int):
        """perf's fentry fuzz: a parameter without a location at entry takes its first one in the body
        (with --range, so does a local at any address: the [INV] ones)."""
        ranges = location_ranges(die, self.units)
        if not ranges or "DW_AT_high_pc" not in function.attributes:
            return None  # perf asks dwarf_highpc, which fails for a function in several ranges
        high = dw.ranges_of(function, self.units)[0][1]
        later = sorted(low for low, end in ranges if address < end and low <= high)
        for low in later:
            at = max(low, address + 1)
            found = location_at(die, "DW_AT_location", at, self.units)
            if found is not None:
                return found
        return None


def _row_line(unit: dw.CUData, address: int) -> tuple[str, int] | None:
    """The unit's line-table row covering the address as (file, line); None as ``source_line`` says."""
    row = unit.row_covering(address)
    if row is None or not 0 < row.line < 1 << 32:
        return None
    file = unit.file_name(row.file)
    return (file, row.line) if file else None


def die_children(die):
    return die.iter_children() if die.has_children else iter(())


def _matches(die, name: str) -> bool:
    """perf's die_match_name: the (integrated) name, then the linkage name."""
    for candidate in (dw.name_of(die), dw.linkage_name_of(die)):
        if candidate is not None and fnmatch.fnmatchcase(candidate, name):
            return True
    return False


def _line_addresses(info: DebugInfo, unit: dw.CUData, file: str | None, line: int) -> list[int]:
    """perf's probe_point_line_walk over the unit: every address a source line starts at."""
    addresses: list[int] = []
    for fname, lineno, address in walk_lines(info, unit):
        if lineno == line and fname and file and dw.strtailcmp(fname, file) and address not in addresses:
            addresses.append(address)
    return addresses


def open_debuginfo(binary: str | None = None, vmlinux: str | None = None, source_dir: str | None = None,
                   module: str | None = None, debuginfod=None) -> DebugInfo:
    """Open the debug info of a user binary (``binary``, as ``-x``), a kernel module (``module``, as
    ``-m``: a loaded module's name or a file) or the kernel.

    For the kernel, ``vmlinux`` is an explicit file; without it the usual debug locations are
    searched and the build-id is checked against the running kernel. What is not on disk comes
    from debuginfod when DEBUGINFOD_URLS names servers (``debuginfod``: a Client with progress and
    cancel; None: a quiet one). Raises UserError naming what is missing and the package that provides it.
    """
    if sum(target is not None for target in (binary, vmlinux, module)) > 1:
        raise UserError("give one of -x BINARY, -k VMLINUX and -m MODULE")
    if binary is not None:
        located = find_binary_debuginfo(binary, debuginfod)
    elif module is not None:
        located = find_module_debuginfo(module, debuginfod=debuginfod)
    else:
        located = find_vmlinux(vmlinux, debuginfod=debuginfod)
    return shared(located, source_dir, debuginfod)


SHARED_FILES = 8  # DebugInfos kept for their next caller: a run browses one binary, or a kernel and a few modules
_shared: OrderedDict[tuple, DebugInfo] = OrderedDict()
_shared_lock = threading.Lock()


def shared(located: LocatedDebugInfo, source_dir: str | None = None, debuginfod=None) -> DebugInfo:
    """The one DebugInfo of a located file: the source view, the probe compiler, the variable tree
    and the function list of one run all ask the same (one parse, one lock, one index in memory).

    Keyed by the file's identity (device, inode, size, mtime: a rebuilt binary is a new file) and by
    what changes answers (the probed binary, the module, the dwz file, ``source_dir``). The debuginfod
    client is the first caller's: ``lines.source_text`` takes a caller's own."""
    try:
        key = (file_identity(located.debug_file), located.supplementary and file_identity(located.supplementary),
               located.binary, located.module, source_dir)
    except OSError:  # gone since it was located: let the engine say so
        return DebugInfo(located, source_dir=source_dir, debuginfod=debuginfod)
    with _shared_lock:
        info = _shared.get(key)
        if info is None:
            info = _shared[key] = DebugInfo(located, source_dir=source_dir, debuginfod=debuginfod)
            while len(_shared) > SHARED_FILES:
                _shared.popitem(last=False)
        _shared.move_to_end(key)
        return info
