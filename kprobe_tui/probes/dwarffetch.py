"""The DWARF back-end: C-level variables, source lines and patterns, at every address a spec names.

A spec becomes (point, place, notes) for each probeable address (inlined copies included, after
``+OFF`` or perf's prologue skip), and each C variable a fetch-arg from its DWARF location
(``probes/locations``); what is not a C variable falls back on the raw back-end's fetch-args.
"""

from __future__ import annotations

import fnmatch
import shlex
from bisect import bisect_left
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from kprobe_tui.debuginfo import dwarfinfo as dw
from kprobe_tui.debuginfo.corrupt import reports_corruption
from kprobe_tui.debuginfo.lines import INT_MAX, MAX_SOURCE, LineSpec, find_line_range, source_lines
from kprobe_tui.debuginfo.scope import DebugInfo, ProbePoint, open_debuginfo
from kprobe_tui.errors import UserError
from kprobe_tui.files import read_regular
from kprobe_tui.kernel.capabilities import readme_offers
from kprobe_tui.probes import locations as loc
from kprobe_tui.probes.naming import event_name, name_fetch_args
from kprobe_tui.probes.notes import INLINED_NOTE, PROLOGUE_NOTE
from kprobe_tui.probes.rawfetch import (
    module_place,
    named_function,
    raw_fetch,
    refuse_exit_arguments,
    unsigned_letter,
    uprobe_data_fetch,
)
from kprobe_tui.probes.render import default_arg_name
from kprobe_tui.probes.spec import BARE_INT_TYPES, LOCALS_GONE, CompiledProbe, FetchArg, ProbeArg, ProbeSpec, sized
from kprobe_tui.probes.symbols import data_symbol_containing


def _dwarf_file(spec: ProbeSpec, *_args, vmlinux: str | None = None, **_kwargs) -> str:
    return spec.binary or vmlinux or "the running kernel's vmlinux"


@reports_corruption(_dwarf_file)
def compile_dwarf(
    spec: ProbeSpec, group: str, taken: Iterable[str] = (), *, vmlinux: str | None = None, readme: str = ""
) -> list[CompiledProbe]:
    """C-level args at every address the spec names (inlined copies included), from DWARF.

    On a return probe parameters are read as the entry arguments the kernel saved (``readme``
    says whether it does); locals are gone by then.
    """
    if spec.address is not None:
        raise UserError(f"{spec.place_text()!r}: C variables at a raw address are not compiled", "probe FUNC+OFFSET instead")
    info, points = dwarf_points(spec, vmlinux)
    probes: list[CompiledProbe] = []
    taken = list(taken)
    shared: dict[int | None, tuple[str, tuple]] = {}  # a pattern's line (None: the spec's place) -> event, fields
    with info.asking():  # the fetch-args read types and members through the points' DIEs
        for point, place, notes in points:
            fetches = _dwarf_fetches(info, spec, point, notes, readme_offers(readme, "return_args"))
            line = int(place.rsplit(":", 1)[1]) if spec.lazy is not None else None  # ;PTN: the line it matched
            fields = tuple((fetch.name, fetch.type) for fetch in fetches)
            if line in shared and shared[line][1] == fields:  # another address of the same place: its event
                name = shared[line][0]
            else:
                name = event_name(spec, taken, line, point.scope if spec.lazy is not None and point.scope else point.function)
                taken.append(name)
                shared.setdefault(line, (name, fields))
            where = f"{spec.binary}:0x{point.file_offset:x}" if spec.is_uprobe else module_place(spec, f"{point.function}+{point.offset}", info.located.module)
            probes.append(CompiledProbe(spec, group, name, where, fetches, point.function, point.offset, tuple(notes)))
    return probes


@reports_corruption(_dwarf_file)
def dwarf_points(spec: ProbeSpec, vmlinux: str | None = None) -> tuple[Any, list[tuple[Any, str, list[str]]]]:
    """The debug info, and (point, place, notes) for every address the spec compiles to, after +OFF or
    the prologue skip: the builder's variable tree lists exactly what Create will read."""
    info = _debuginfo(spec.binary, vmlinux, spec.module, _mtime(spec.binary or spec.module or vmlinux))
    with info.asking():
        if spec.lazy is not None:
            points = _lazy_points(info, spec, spec.lazy)
        else:
            points = [(point, place) for place in _function_places(info, spec) for point in info.probe_points(place, externs=True)]
        if not points:
            raise UserError(f"{spec.place_text()!r}: no probeable address", "for a line, see which lines are probeable: kprobe-tui lines FUNC")
        moved = []
        for point, place in points:
            notes: list[str] = [f"{INLINED_NOTE}{point.function}"] if point.is_inline else []
            moved.append((_moved_point(info, spec, point, notes), place, notes))
    return info, moved


def _function_places(info, spec: ProbeSpec) -> list[str]:
    """The spec as the debuginfo engine's FUNC[@SRC][:RLN][%return] places (SRC:ALN resolved)."""
    if spec.function is None and spec.source is not None and spec.line is not None:
        # SRC:ALN -> the function holding that line, and the line relative to it
        return [_source_line_place(info, spec.source, spec.line)]
    place = named_function(spec) + (f"@{spec.source}" if spec.source else "") + (f":{spec.line}" if spec.line is not None else "")
    return [place + ("%return" if spec.is_return else "")]


def _lazy_points(info, spec: ProbeSpec, lazy: str) -> list[tuple[Any, str]]:
    """perf's FUNC;PTN and SRC;PTN (``lazy``): (point, place) at each address where a line of the function
    (or of the whole file) whose text matches the glob, spaces ignored, starts; the place names the line
    (FUNC:RLN, or SRC:ALN) for kprobe-tui's event names."""
    what = spec.function or spec.source
    found = find_line_range(info, LineSpec(spec.function, spec.source, 0 if spec.function else 1, INT_MAX))
    source = info.source_file(found.path, found.comp_dir_cu) if found.path else None
    if source is None:
        raise UserError(f"{spec.place_text()!r}: the source text of {found.path or what} is not found",
                        "a ;PATTERN is matched against the source: run where the source tree is")
    text = source_lines(read_regular(source, "source file", MAX_SOURCE))
    pattern = "".join(lazy.split())
    lines = {n for n, line in enumerate(text, 1) if fnmatch.fnmatchcase("".join(line.split()), pattern)}
    points = info.lazy_points(spec.function, spec.source, lines, externs=True)
    if not points:
        raise UserError(f"{lazy!r}: no probeable line of {what} matches",
                        "the pattern is a glob matched against whole lines, spaces ignored: e.g. ';sum +=*'")
    if spec.function is None:
        return [(point, f"{spec.source}:{point.line}") for point in points]
    at = f"@{spec.source}" if spec.source else ""
    return [(point, f"{spec.function}{at}:{point.line - found.offset}") for point in points]


def _source_line_place(info, source: str, line: int) -> str:
    found = find_line_range(info, LineSpec(None, source, line, line))
    if line not in found.lines:
        raise UserError(f"{source}:{line}: not a probeable line",
                        f"see which are: kprobe-tui lines {shlex.quote(f'{source}:{max(1, line - 5)}-{line + 5}')}")
    unit = info.units.of(found.comp_dir_cu)
    for row in unit.rows:
        name = unit.file_name(row.file)
        if row.line == line and not row.end_sequence and name and dw.strtailcmp(source, name):
            function = info.real_function_at(unit.cu, row.address)
            if function is not None and dw.name_of(function):
                return f"{dw.name_of(function)}@{source}:{line - dw.decl_line(function)}"
    raise UserError(f"{source}:{line}: no function holds this line", "probe FUNC:LINE instead")


def _mtime(path: str | None) -> float:
    try:
        return Path(path).stat().st_mtime if path else 0.0
    except OSError:
        return 0.0


@lru_cache(maxsize=4)
def _debuginfo(binary: str | None, vmlinux: str | None, module: str | None, mtime: float):
    """Opened once per file version: the TUI compiles many specs against the same binary."""
    return open_debuginfo(binary=binary, vmlinux=None if module else vmlinux, module=module)


def _moved_point(info, spec: ProbeSpec, point, notes: list[str]):
    """The point after +OFF, or after perf's prologue skip (unoptimised uprobes reading variables)."""
    address = point.address
    if spec.offset:
        address += spec.offset
    elif _skips_prologue(info, spec, point):
        address = _after_prologue(info, point.address)
        if address != point.address:
            notes.append(PROLOGUE_NOTE.format(entry=point.address))
    if address == point.address:
        return point
    function = info.real_function_at(info.cu(info.aranges.cu_at(point.address)), address)
    if function is None:
        raise UserError(f"+{spec.offset}: past the end of {spec.function}", "use an offset inside the function")
    return replace(point, address=address, offset=point.offset + address - point.address,
                file_offset=info.file_offset(address), variables=info.variables_at(function, function, address, externs=True))


def _skips_prologue(info, spec: ProbeSpec, point) -> bool:
    """perf's skip_prologue(): uprobes on the entry of FUNC or FUNC@SRC (no line, offset or pattern), when
    a C variable is read, in an out-of-line definition, in a unit compiled without optimisation."""
    if not spec.is_uprobe or spec.kind != "entry" or spec.lazy is not None or point.is_inline:
        return False
    if not any(a.kind in ("var", "params", "vars") for a in spec.args):
        return False  # perf_probe_with_var: registers, $retval, @symbols are as good at the first instruction
    definitions = info.definitions(spec.function, spec.source)
    return bool(definitions) and dw.is_func_instance(definitions[0]) and not _optimized(info, definitions[0].cu.cu_offset)


@lru_cache(maxsize=64)
def _optimized(info, cu_offset: int) -> bool:
    """perf's die_is_optimized_target: some variable or parameter of the unit has a location list. (Not
    the producer's -O flags: -O1 code without a location list is skipped over as perf does.)"""
    for die in info.cu(cu_offset).iter_DIEs():
        if die.tag in ("DW_TAG_formal_parameter", "DW_TAG_variable"):
            location = dw.attr(die, "DW_AT_location")
            if location is not None and location.form == "DW_FORM_sec_offset":
                return True
    return False


def _after_prologue(info, entry: int) -> int:
    """perf's die_skip_prologue: in the unit's line table (sorted as elfutils sorts it), the address of the
    row after the entry's first row, unless the entry's row ends the prologue itself (clang's marker) or
    that address is past the function. Not "the next source line": a one-line function stores its
    arguments before its second row, on the same line."""
    unit = info.units.of(info.cu(info.aranges.cu_at(entry)))
    function = info.real_function_at(unit.cu, entry)
    if function is None or "DW_AT_high_pc" not in function.attributes:
        return entry  # perf asks dwarf_highpc, which fails for a function in several ranges
    high = dw.ranges_of(function, info.units)[0][1]
    rows = unit.rows
    first = bisect_left(rows, entry, key=lambda row: row.address)  # an end_sequence row there comes first, as in perf
    if first == len(rows) or rows[first].address != entry:
        return entry
    if rows[first].prologue_end or first + 1 == len(rows):
        return entry
    after = rows[first + 1].address
    return after if after < high else entry


@dataclass(frozen=True)
class FetchSite:
    """Where one probe's C variables are read: its debug info, spec and point, how memory at a link-time
    address is fetched, and whether the kernel saves entry arguments for return probes (tracefs README)."""

    info: DebugInfo
    spec: ProbeSpec
    point: ProbePoint
    absolute: Callable[[int], str]
    return_args: bool


def _dwarf_fetches(info, spec: ProbeSpec, point, notes: list[str], return_args: bool) -> tuple[FetchArg, ...]:
    site = FetchSite(info, spec, point, _absolute_fetch(info, spec, point.address), return_args)
    pairs: list[tuple[ProbeArg | None, str, str, str | None]] = []
    for arg in spec.args:
        if arg.kind == "var":
            variable = _find_variable(point, arg.var, spec)
            if spec.is_return and not variable.is_external:
                fetch, type_, more = _exit_fetch(site, variable, arg, str(arg))
            else:
                fetch, type_, more = _variable_fetch(site, variable, arg)
            notes += more
            pairs.append((arg, default_arg_name(arg), fetch, type_))
        elif arg.kind == "params" and spec.is_return:
            refuse_exit_arguments(spec, str(arg), return_args)
            for variable in _parameters(point):
                path_arg = ProbeArg(variable.name, "var", var=variable.name)
                try:
                    fetch, type_, more = _exit_fetch(site, variable, path_arg, str(arg))
                except loc.NotExpressible as exc:
                    notes.append(f"{arg.text}: skipped {exc.message}")
                    continue
                notes += more
                pairs.append((None, variable.name, fetch, type_))
        elif arg.kind in ("params", "vars"):
            chosen = _scope_variables(point, params_only=arg.kind == "params")
            for variable in chosen:
                path_arg = ProbeArg(variable.name, "var", var=variable.name)
                try:
                    fetch, type_, more = _variable_fetch(site, variable, path_arg)
                except loc.NotExpressible as exc:
                    notes.append(f"{arg.text}: skipped {exc.message}")
                    continue
                notes += more
                pairs.append((None, variable.name, fetch, type_))
        elif arg.kind == "retval" and (arg.type in BARE_INT_TYPES or not (arg.type or spec.perf_dialect)):
            natural = _return_type(info, spec)
            pairs.append((arg, "retval", "$retval", sized(arg.type, natural) if arg.type else natural))
        else:
            fetch = raw_fetch(arg, spec, False, point.address, return_args)
            pairs.append((arg, default_arg_name(arg), fetch, arg.type))
    return name_fetch_args(pairs, perf=spec.perf_dialect)


def _parameters(point) -> list:
    """The probed function's own parameters, in declaration order (the order ``$argN`` counts)."""
    return [v for v in point.variables if v.is_param and v.die is not None and v.die.get_parent().tag == "DW_TAG_subprogram"]


def _exit_fetch(site: FetchSite, variable, arg: ProbeArg, token: str) -> tuple[str, str, list[str]]:
    """A parameter on a return probe: read from the entry argument the kernel saved, never its entry register."""
    spec, point, absolute = site.spec, site.point, site.absolute
    if not variable.is_param:
        raise UserError(f"{token!r}: {LOCALS_GONE}", "capture parameters, globals or $retval, or probe the entry")
    refuse_exit_arguments(spec, token, site.return_args)
    if variable.const_value is not None and variable.location is None:
        return _variable_fetch(site, variable, arg)  # a constant at entry and exit alike
    parameters = _parameters(point)
    position = next((n for n, parameter in enumerate(parameters, 1) if parameter is variable), None)
    if position is None:
        raise UserError(f"{token!r}: {variable.name} is a parameter of a function inlined here, not of {point.function}",
                        "probe the entry of the inlined code")
    if "." in point.function:
        raise UserError(f"{token!r}: {point.function} is a compiler-made copy whose calling convention may drop or "
                        "reorder parameters", f"probe the entry: {spec.function} {token}")
    for earlier in parameters[: position - 1]:
        if loc.size_of(earlier.type_die) > 8:
            raise UserError(f"{token!r}: {earlier.name} ({loc.type_name(earlier.type_die)}) is passed by value ahead of it, "
                            f"so $arg{position} is not {variable.name}", "probe the entry instead")
    saved = loc.Located(value=f"$arg{position}")  # what the kernel saved at entry: the register is clobbered by now
    obj = loc.walk(loc.Object(variable.type_die, saved), arg.path, variable.name, absolute)
    return loc.object_fetch(obj, arg.text, arg.type, absolute, unsigned_letter(spec))


def _scope_variables(point, params_only: bool) -> list:
    """Locals (or parameters) at the point, one per name: the innermost wins (perf dedups too)."""
    chosen: dict[str, object] = {}
    for variable in point.variables:
        if variable.is_external or (params_only and not variable.is_param):
            continue
        if variable.location is None and variable.const_value is None:
            continue  # optimised out here
        chosen[variable.name] = variable
    return list(chosen.values())


def _find_variable(point, name: str, spec: ProbeSpec):
    """The innermost variable of that name in scope (later in the walk is deeper), else a global."""
    locals_ = [v for v in point.variables if v.name == name and not v.is_external]
    globals_ = [v for v in point.variables if v.name == name and v.is_external]
    if locals_ or globals_:
        return (locals_ or globals_)[-1] if locals_ else globals_[0]
    in_scope = sorted({v.name for v in point.variables if not v.is_external})
    raise UserError(
        f"{name!r}: no such variable at {spec.place_text()} ({point.function}+{point.offset})",
        f"in scope there: {', '.join(in_scope) or 'nothing'}",
    )


def _variable_fetch(site: FetchSite, variable, arg: ProbeArg) -> tuple[str, str, list[str]]:
    info, spec, point, absolute = site.info, site.spec, site.point, site.absolute
    what = arg.text
    if variable.const_value is not None and variable.location is None:
        if isinstance(variable.const_value, bytes) or arg.path:
            raise loc.NotExpressible(f"{what}: {variable.name} is a compile-time constant without storage")
        natural = loc.fetch_type(variable.type_die, what, unsigned_letter(spec))
        return f"\\{variable.const_value}", sized(arg.type, natural) if arg.type else natural, []
    if variable.location is None:
        raise loc.NotExpressible(
            f"{variable.name}: optimised out at {point.function}+{point.offset} (line {point.line})",
            "probe another line where it is live (kprobe-tui vars shows where), or build with -O0/-Og",
        )
    located = loc.evaluate(
        variable.location, variable.name,
        frame_base=lambda: _frame_base(site, variable),
        cfa=lambda: loc.cfa_at(_cfi_file(info, spec), point.address, variable.name),
        absolute=absolute,
    )
    obj = loc.walk(loc.Object(variable.type_die, located), arg.path, variable.name, absolute)
    return loc.object_fetch(obj, what, arg.type, absolute, unsigned_letter(spec))


def _frame_base(site: FetchSite, variable):
    info, spec, point, absolute = site.info, site.spec, site.point, site.absolute
    if not variable.frame_base:
        raise loc.NotExpressible(f"{variable.name}: the function has no frame base at this address")
    base = loc.evaluate(
        variable.frame_base, f"frame base of {point.function}",
        cfa=lambda: loc.cfa_at(_cfi_file(info, spec), point.address, variable.name), absolute=absolute,
    )
    if base.value is not None and base.value.startswith("%"):
        return loc.Value(base.value, 0)  # DW_OP_regN as a frame base means the register's contents
    if base.address is None:
        raise loc.NotExpressible(f"{variable.name}: the frame base is not register-based here")
    return base.address


def _cfi_file(info, spec: ProbeSpec) -> str:
    """Where the call-frame information is: the binary itself (.eh_frame), else the debug file."""
    return str(spec.binary or info.located.debug_file)


def _return_type(info, spec: ProbeSpec) -> str | None:
    site = info.function(spec.function)[0]
    return_type = loc.type_of(site.die)
    if return_type is None:
        return None
    try:
        return loc.fetch_type(return_type, "$retval", unsigned_letter(spec))
    except loc.NotExpressible:
        return None  # a struct returned in registers: the raw %ax is the best there is


def _absolute_fetch(info, spec: ProbeSpec, probe_address: int):
    """Memory at a link-time address: ``@+X`` for uprobes, ``@symbol+off`` for kprobes (KASLR-proof)."""
    binary = spec.binary
    if binary is not None:
        return lambda address: uprobe_data_fetch(binary, address, probe_address)

    def kernel(address: int) -> str:
        name, delta = data_symbol_containing(str(info.located.debug_file), address)
        return f"@{name}{delta:+d}" if delta else f"@{name}"

    return kernel

