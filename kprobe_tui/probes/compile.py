"""From a ProbeSpec to what the kernel takes: the place and the fetch-args.

Kernel probes and uprobes go through the same code: only the place differs (``func+off`` vs
``/path:0xFILEOFFSET``) and what a fetch-arg may name (uprobes cannot take ``@symbol``, they take
``@+FILEOFFSET``). C-level variables are compiled from DWARF (``compile_dwarf``) or, for kernel
entry and return probes without debug info, from BTF (``compile_btf``).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

from kprobe_tui.blocking import blocking
from kprobe_tui.debuginfo.corrupt import reports_corruption
from kprobe_tui.errors import UserError
from kprobe_tui.kernel.capabilities import readme_offers
from kprobe_tui.probes.render import always_quoted, default_arg_name, default_event_name, perf_arg_name, unique_name
from kprobe_tui.probes.spec import (
    BARE_INT_TYPES,
    LOCALS_GONE,
    MAX_ARG_NAME_LEN,
    MAX_EVENT_NAME_LEN,
    MAX_TRACE_ARGS,
    CompiledProbe,
    FetchArg,
    ProbeArg,
    ProbeSpec,
    sized,
)
from kprobe_tui.probes.symbols import data_symbol_containing, elf_symbols, symbol_address

# What a probe's notes say when it is on an inlined copy, or past the prologue (perf says both its own way).
INLINED_NOTE = "inlined copy in "
PROLOGUE_NOTE = "prologue skipped (probe 0x{entry:x} to see the function's very first instruction)"


def prologue_entry(notes: Iterable[str]) -> int | None:
    """The function entry a probe's prologue skip moved away from, if its notes say so."""
    for note in notes:
        found = re.fullmatch(re.escape(PROLOGUE_NOTE).replace(r"0x\{entry:x\}", "0x([0-9a-f]+)"), note)
        if found:
            return int(found[1], 16)
    return None


# x86_64 System V: integer parameters 1..6.
ARG_REGISTERS = ("di", "si", "dx", "cx", "r8", "r9")


def uprobe_data_fetch(binary: str, data_address: int, probe_address: int) -> str:
    """``@+X`` for a uprobe: the kernel reads at (probe's mapped address - probe's file offset) + X.

    So X is not the data's file offset (data and text segments are shifted differently between
    file and memory); it is the data's address relative to where the probe's segment puts offset 0.
    """
    text_bias = probe_address - elf_symbols(binary).file_offset(probe_address)
    return f"@+{data_address - text_bias}"


def _refuse_exit_arguments(spec: ProbeSpec, token: str, return_args: bool) -> None:
    """Arguments at function exit exist only where the kernel saved them at entry: refuse with why, or pass."""
    entry = spec.place_text().removesuffix("%return")
    option = f"-x {shlex.quote(spec.binary)} " if spec.is_uprobe else "--fprobe " if spec.kind == "fprobe" else ""
    command = f"kprobe-tui probe {option}{always_quoted(entry)} {always_quoted(token)}"
    if spec.is_uprobe:
        raise UserError(f"{token!r}: uprobes cannot read arguments at function exit "
                        "(the kernel saves entry arguments for kernel return probes only)", f"probe the entry too: {command}")
    if not return_args:
        raise UserError(f"{token!r}: this kernel cannot read arguments at function exit (its tracefs README "
                        "lacks 'return probes support: $retval, $arg<N>')", f"probe the entry too: {command}")


def _raw_fetch(
    arg: ProbeArg, spec: ProbeSpec, arg_n_supported: bool, probe_address: int | None, return_args: bool = False
) -> str:
    """Fetch-args that need no debug info: registers, $argN, $retval, $comm, @symbol, raw text."""
    if arg.kind == "reg":
        return f"%{arg.var}"
    if arg.kind == "retval":
        return "$retval"
    if arg.kind == "comm":
        return "$comm"
    if arg.kind == "raw":
        return arg.text
    if arg.kind == "argN":
        if spec.is_return:  # the value the kernel saved at entry: the entry register is clobbered by now
            _refuse_exit_arguments(spec, str(arg), return_args)
            return f"$arg{arg.index}"
        # uprobes refuse $argN ("only on function entry or exit": they cannot tell), kprobes need README's $arg<N>
        if arg_n_supported and not spec.is_uprobe:
            return f"$arg{arg.index}"
        if arg.index > len(ARG_REGISTERS):
            raise UserError(f"{arg.text!r}: only the first {len(ARG_REGISTERS)} parameters are in registers", "read the stack with $stackN")
        return f"%{ARG_REGISTERS[arg.index - 1]}"
    if arg.kind == "symbol":
        if not spec.is_uprobe:
            return f"@{arg.var}" + (f"{arg.index:+d}" if arg.index else "")
        # uprobes cannot name symbols: compute the address relative to the probed mapping
        return uprobe_data_fetch(spec.binary, symbol_address(spec.binary, arg.var) + arg.index, probe_address)
    raise UserError(f"{arg.text!r}: needs debug info to compile", "give a binary with DWARF (-x) or a vmlinux (-k)")


def needs_debuginfo(spec: ProbeSpec) -> bool:
    """C-level variables, source lines and patterns need DWARF (or BTF for kernel entry args)."""
    return spec.kind == "line" or spec.source is not None or any(a.kind in ("var", "params", "vars") for a in spec.args)


def name_fetch_args(pairs: Iterable[tuple[ProbeArg | None, str, str, str | None]], perf: bool = False) -> tuple[FetchArg, ...]:
    """(source, default name, fetch, type) -> FetchArgs with unique kernel-valid names; user names win.

    ``perf``: default names as perf gives them (``perf_arg_name``). A bare ``x``/``u``/``s`` left on a
    value of no known width (a register, raw memory) is 64 bits wide."""
    pairs = [(src, base, fetch, sized(type_, None) if type_ else type_) for src, base, fetch, type_ in pairs]
    if len(pairs) > MAX_TRACE_ARGS:
        raise UserError(f"{len(pairs)} arguments: the kernel takes at most {MAX_TRACE_ARGS}", "capture fewer values")
    user_names = [src.name for src, *_ in pairs if src is not None and src.name]
    duplicate = next((n for n in user_names if user_names.count(n) > 1), None)
    if duplicate:
        raise UserError(f"{duplicate!r}: two arguments have this name", "give each NAME= once")
    names: list[str] = []
    for position, (src, base, _, _) in enumerate(pairs, 1):
        if src is not None and src.name:
            names.append(src.name)
        else:  # defaults step aside for user-given names, which are kept verbatim
            wanted = perf_arg_name(src, base, position) if perf else base
            names.append(unique_name(wanted, set(names) | set(user_names), MAX_ARG_NAME_LEN))
    return tuple(FetchArg(name, fetch, type_, src, implicit_name=perf and _unnamed_raw(src) and name == f"arg{position}")
                 for position, (name, (src, _, fetch, type_)) in enumerate(zip(names, pairs), 1))


def _unnamed_raw(src: ProbeArg | None) -> bool:
    """A fetch-arg perf writes without NAME=: one written by hand, a register, a symbol, $retval..."""
    return src is not None and not src.name and src.kind != "var"


def event_name(spec: ProbeSpec, taken: Iterable[str], line: int | None = None, function: str | None = None) -> str:
    """The user's event name (refused if taken), or a default made unique in the group.

    In the perf dialect the name is perf's, taken or not, and shared by every probe of the spec (the
    kernel appends them to one event): whether a taken name is an error (perf's EEXIST) or gets a
    ``_1`` (``-f``) the caller decides, as perf's ``--force`` does."""
    if spec.perf_dialect:
        return default_event_name(spec, line, function)
    taken = set(taken)
    if spec.event:
        if spec.event in taken:
            raise UserError(f"{spec.event!r}: an event of that name exists in group {spec.group!r}", "pick another EVENT= name, or del it first")
        return spec.event
    return unique_name(default_event_name(spec, line), taken, MAX_EVENT_NAME_LEN)


def compile_raw(
    spec: ProbeSpec, group: str, taken: Iterable[str] = (), arg_n_supported: bool = True, return_args: bool = False
) -> CompiledProbe:
    """A probe at a function entry/return/offset or address, with register-level args only."""
    if needs_debuginfo(spec):
        raise UserError(f"{spec.place_text()!r} with C variables needs debug info", "compile_dwarf or compile_btf handles it")
    function, function_offset, address = spec.function, spec.offset, None
    if spec.is_uprobe:
        symbols = elf_symbols(spec.binary)
        if spec.address is not None:
            address = spec.address
            owner = symbols.containing(address)
            function, function_offset = (owner.name, address - owner.address) if owner else (None, 0)
        else:
            sym = symbols.function(spec.function)
            if spec.offset >= max(sym.size, 1):
                raise UserError(f"+{spec.offset}: past the end of {sym.name} ({sym.size} bytes)", "use an offset inside the function")
            address = sym.address + spec.offset
        place = f"{spec.binary}:0x{symbols.file_offset(address):x}"
    elif spec.address is not None:
        place = f"0x{spec.address:x}"
    else:
        place = module_place(spec, f"{spec.function}+{spec.offset}" if spec.kind != "fprobe" else spec.function)
    fetches = name_fetch_args(
        ((arg, default_arg_name(arg), _raw_fetch(arg, spec, arg_n_supported, address, return_args), arg.type)
         for arg in spec.args),
        perf=spec.perf_dialect,
    )
    return CompiledProbe(spec, group, event_name(spec, taken), place, fetches, function, function_offset)


def module_place(spec: ProbeSpec, place: str, name: str | None = None) -> str:
    """``MODULE:place`` for a function of a kernel module: the kernel looks the name up in that module only.

    ``name``: the module's name from its debug file (-m may name a file); else the -m word, spelled as the kernel does."""
    if not spec.module:
        return place
    module = name or Path(spec.module).name.split(".", 1)[0].replace("-", "_")
    if not re.fullmatch(r"[A-Za-z0-9_]+", module):  # it goes to kprobe_events, and may come from a file's .modinfo
        raise UserError(f"{module!r}: not a kernel module name", "module names are letters, digits and '_' (lsmod)")
    return f"{module}:{place}"


def _has_dwarf(path: str) -> bool:
    """Whether a file carries its own .debug_info (then $retval gets the function's return type)."""
    try:
        return elf_symbols(path).has_debug_info
    except UserError:
        return False


def compile_spec(
    spec: ProbeSpec,
    group: str,
    taken: Iterable[str] = (),
    *,
    readme: str = "",
    vmlinux: str | None = None,
    btf_path: str | Path | None = None,
) -> list[CompiledProbe]:
    """Compile a spec the best way available: raw, from DWARF (-x BIN or -k VMLINUX), or from BTF.

    ``readme`` is tracefs README: it says whether this kernel takes $argN, BTF argument names, and
    arguments on return probes.
    A line probe can compile to several probes (inlined copies), named ``ev``, ``ev_1``...
    Each is checked to be one valid definition line (``CompiledProbe.check``) before it is returned.
    """
    blocking(f"compiling {spec.place_text()}")
    debug_file = spec.binary or vmlinux
    # $retval gets the function's return type (kprobe-tui's dialect), or its width (:x, :u, :s);
    # perf leaves a bare $retval untyped.
    untyped_retval = any(a.kind == "retval" and (a.type in BARE_INT_TYPES or not (a.type or spec.perf_dialect))
                         for a in spec.args)
    typed_retval = untyped_retval and (_has_dwarf(debug_file) if debug_file else _btf_available(btf_path))
    if not needs_debuginfo(spec) and not typed_retval:
        probes = [compile_raw(spec, group, taken, arg_n_supported=readme_offers(readme, "arg_n"),
                              return_args=readme_offers(readme, "return_args"))]
    elif spec.is_uprobe or vmlinux or spec.module:
        probes = compile_dwarf(spec, group, taken, vmlinux=vmlinux, readme=readme)
    else:
        probes = [compile_btf(spec, group, taken, readme=readme, btf_path=btf_path)]
    return [probe.check() for probe in probes]


def _btf_available(btf_path: str | Path | None) -> bool:
    return Path(btf_path or "/sys/kernel/btf/vmlinux").exists()


# -- DWARF ------------------------------------------------------------------------------------


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
    with info.asking():  # the fetch-args read types and members through the points' DIEs
        for point, place, notes in points:
            fetches = _dwarf_fetches(info, spec, point, notes, readme_offers(readme, "return_args"))
            line = int(place.rsplit(":", 1)[1]) if spec.lazy is not None else None  # ;PTN: the line it matched
            name = event_name(spec, taken, line, point.scope if spec.lazy is not None and point.scope else point.function)
            taken.append(name)
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
            points = _lazy_points(info, spec)
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
    if spec.function is None:  # SRC:ALN -> the function holding that line, and the line relative to it
        return [_source_line_place(info, spec.source, spec.line)]
    place = spec.function + (f"@{spec.source}" if spec.source else "") + (f":{spec.line}" if spec.line is not None else "")
    return [place + ("%return" if spec.is_return else "")]


def _lazy_points(info, spec: ProbeSpec) -> list[tuple[Any, str]]:
    """perf's FUNC;PTN and SRC;PTN: (point, place) at each address where a line of the function (or of
    the whole file) whose text matches the glob, spaces ignored, starts; the place names the line
    (FUNC:RLN, or SRC:ALN) for kprobe-tui's event names."""
    import fnmatch

    from kprobe_tui.debuginfo.lines import INT_MAX, MAX_SOURCE, LineSpec, find_line_range, source_lines
    from kprobe_tui.files import read_regular

    what = spec.function or spec.source
    found = find_line_range(info, LineSpec(spec.function, spec.source, 0 if spec.function else 1, INT_MAX))
    source = info.source_file(found.path, found.comp_dir_cu) if found.path else None
    if source is None:
        raise UserError(f"{spec.place_text()!r}: the source text of {found.path or what} is not found",
                        "a ;PATTERN is matched against the source: run where the source tree is")
    text = source_lines(read_regular(source, "source file", MAX_SOURCE))
    pattern = "".join(spec.lazy.split())
    lines = {n for n, line in enumerate(text, 1) if fnmatch.fnmatchcase("".join(line.split()), pattern)}
    points = info.lazy_points(spec.function, spec.source, lines, externs=True)
    if not points:
        raise UserError(f"{spec.lazy!r}: no probeable line of {what} matches",
                        "the pattern is a glob matched against whole lines, spaces ignored: e.g. ';sum +=*'")
    if spec.function is None:
        return [(point, f"{spec.source}:{point.line}") for point in points]
    at = f"@{spec.source}" if spec.source else ""
    return [(point, f"{spec.function}{at}:{point.line - found.offset}") for point in points]


def _source_line_place(info, source: str, line: int) -> str:
    from kprobe_tui.debuginfo import dwarfinfo as dw
    from kprobe_tui.debuginfo.lines import LineSpec, find_line_range

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
    from kprobe_tui.debuginfo.scope import open_debuginfo

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
    from dataclasses import replace as copy

    return copy(point, address=address, offset=point.offset + address - point.address,
                file_offset=info.file_offset(address), variables=info.variables_at(function, function, address, externs=True))


def _skips_prologue(info, spec: ProbeSpec, point) -> bool:
    """perf's skip_prologue(): uprobes on the entry of FUNC or FUNC@SRC (no line, offset or pattern), when
    a C variable is read, in an out-of-line definition, in a unit compiled without optimisation."""
    if not spec.is_uprobe or spec.kind != "entry" or spec.lazy is not None or point.is_inline:
        return False
    if not any(a.kind in ("var", "params", "vars") for a in spec.args):
        return False  # perf_probe_with_var: registers, $retval, @symbols are as good at the first instruction
    from kprobe_tui.debuginfo import dwarfinfo as dw

    definitions = info.definitions(spec.function, spec.source)
    return bool(definitions) and dw.is_func_instance(definitions[0]) and not _optimized(info, definitions[0].cu.cu_offset)


@lru_cache(maxsize=64)
def _optimized(info, cu_offset: int) -> bool:
    """perf's die_is_optimized_target: some variable or parameter of the unit has a location list. (Not
    the producer's -O flags: -O1 code without a location list is skipped over as perf does.)"""
    from kprobe_tui.debuginfo import dwarfinfo as dw

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
    from bisect import bisect_left

    from kprobe_tui.debuginfo import dwarfinfo as dw

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


def _dwarf_fetches(info, spec: ProbeSpec, point, notes: list[str], return_args: bool) -> tuple[FetchArg, ...]:
    from kprobe_tui.probes import locations as loc

    absolute = _absolute_fetch(info, spec, point.address)
    pairs: list[tuple[ProbeArg | None, str, str, str | None]] = []
    for arg in spec.args:
        if arg.kind == "var":
            variable = _find_variable(point, arg.var, spec)
            if spec.is_return and not variable.is_external:
                fetch, type_, more = _exit_fetch(info, spec, point, variable, arg, str(arg), absolute, return_args)
            else:
                fetch, type_, more = _variable_fetch(info, spec, point, variable, arg, absolute)
            notes += more
            pairs.append((arg, default_arg_name(arg), fetch, type_))
        elif arg.kind == "params" and spec.is_return:
            _refuse_exit_arguments(spec, str(arg), return_args)
            for variable in _parameters(point):
                path_arg = ProbeArg(variable.name, "var", var=variable.name)
                try:
                    fetch, type_, more = _exit_fetch(info, spec, point, variable, path_arg, str(arg), absolute, return_args)
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
                    fetch, type_, more = _variable_fetch(info, spec, point, variable, path_arg, absolute)
                except loc.NotExpressible as exc:
                    notes.append(f"{arg.text}: skipped {exc.message}")
                    continue
                notes += more
                pairs.append((None, variable.name, fetch, type_))
        elif arg.kind == "retval" and (arg.type in BARE_INT_TYPES or not (arg.type or spec.perf_dialect)):
            natural = _return_type(info, spec)
            pairs.append((arg, "retval", "$retval", sized(arg.type, natural) if arg.type else natural))
        else:
            fetch = _raw_fetch(arg, spec, False, point.address, return_args)
            pairs.append((arg, default_arg_name(arg), fetch, arg.type))
    return name_fetch_args(pairs, perf=spec.perf_dialect)


def _parameters(point) -> list:
    """The probed function's own parameters, in declaration order (the order ``$argN`` counts)."""
    return [v for v in point.variables if v.is_param and v.die is not None and v.die.get_parent().tag == "DW_TAG_subprogram"]


def _exit_fetch(info, spec: ProbeSpec, point, variable, arg: ProbeArg, token: str, absolute, return_args: bool):
    """A parameter on a return probe: read from the entry argument the kernel saved, never its entry register."""
    from kprobe_tui.probes import locations as loc

    if not variable.is_param:
        raise UserError(f"{token!r}: {LOCALS_GONE}", "capture parameters, globals or $retval, or probe the entry")
    _refuse_exit_arguments(spec, token, return_args)
    if variable.const_value is not None and variable.location is None:
        return _variable_fetch(info, spec, point, variable, arg, absolute)  # a constant at entry and exit alike
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
    return loc.object_fetch(obj, arg.text, arg.type, absolute, _unsigned(spec))


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


def _unsigned(spec: ProbeSpec) -> str:
    """The type letter for unsigned values: ``u``, or ``x`` as perf writes them."""
    return "x" if spec.perf_dialect else "u"


def _variable_fetch(info, spec: ProbeSpec, point, variable, arg: ProbeArg, absolute) -> tuple[str, str, list[str]]:
    from kprobe_tui.probes import locations as loc

    what = arg.text
    if variable.const_value is not None and variable.location is None:
        if isinstance(variable.const_value, bytes) or arg.path:
            raise loc.NotExpressible(f"{what}: {variable.name} is a compile-time constant without storage")
        natural = loc.fetch_type(variable.type_die, what, _unsigned(spec))
        return f"\\{variable.const_value}", sized(arg.type, natural) if arg.type else natural, []
    if variable.location is None:
        raise loc.NotExpressible(
            f"{variable.name}: optimised out at {point.function}+{point.offset} (line {point.line})",
            "probe another line where it is live (kprobe-tui vars shows where), or build with -O0/-Og",
        )
    located = loc.evaluate(
        variable.location, variable.name,
        frame_base=lambda: _frame_base(info, spec, point, variable, absolute),
        cfa=lambda: loc.cfa_at(_cfi_file(info, spec), point.address, variable.name),
        absolute=absolute,
    )
    obj = loc.walk(loc.Object(variable.type_die, located), arg.path, variable.name, absolute)
    return loc.object_fetch(obj, what, arg.type, absolute, _unsigned(spec))


def _frame_base(info, spec: ProbeSpec, point, variable, absolute):
    from kprobe_tui.probes import locations as loc

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
    from kprobe_tui.probes import locations as loc

    site = info.function(spec.function)[0]
    return_type = loc.type_of(site.die)
    if return_type is None:
        return None
    try:
        return loc.fetch_type(return_type, "$retval", _unsigned(spec))
    except loc.NotExpressible:
        return None  # a struct returned in registers: the raw %ax is the best there is


def _absolute_fetch(info, spec: ProbeSpec, probe_address: int):
    """Memory at a link-time address: ``@+X`` for uprobes, ``@symbol+off`` for kprobes (KASLR-proof)."""
    if spec.is_uprobe:
        return lambda address: uprobe_data_fetch(spec.binary, address, probe_address)

    def kernel(address: int) -> str:
        name, delta = data_symbol_containing(str(info.located.debug_file), address)
        return f"@{name}{delta:+d}" if delta else f"@{name}"

    return kernel


# -- BTF --------------------------------------------------------------------------------------


def compile_btf(
    spec: ProbeSpec, group: str, taken: Iterable[str] = (), *, readme: str = "", btf_path: str | Path | None = None
) -> CompiledProbe:
    """Kernel entry and return probes by parameter name with no DWARF: BTF names the parameters and lays out structs.

    Kernels whose README advertises ``<argname>`` (>= 6.5) resolve names and ``->`` chains
    themselves, so those are passed through; otherwise (and for ``.``/``[N]``) parameter N is
    the calling-convention register (``$argN`` at function exit, saved by the kernel at entry)
    and members are offsets from our BTF reader.
    """
    from kprobe_tui.kernel.btf import Btf

    if spec.kind not in ("entry", "return", "fprobe") or spec.source:
        raise UserError(f"{spec.place_text()!r}: without DWARF only parameters at function entry or exit can be named",
                        "give the kernel's debug info: -k /usr/lib/debug/boot/vmlinux-$(uname -r)")
    btf = Btf.shared(btf_path)
    if not btf.has_function(spec.function):
        raise UserError(f"{spec.function!r}: not in the kernel's BTF (inlined, or in a module without BTF)",
                        "probe it with registers ($argN, %di) or give -k VMLINUX")
    params = [p for p in btf.params(spec.function) if p.name != "..."]
    kernel_names = readme_offers(readme, "btf_args")
    at_exit = spec.is_return
    if at_exit:
        asked = next((arg for arg in spec.args if arg.kind in ("params", "var")), None)
        if asked is not None:
            _refuse_exit_arguments(spec, str(asked), readme_offers(readme, "return_args"))
    pairs: list[tuple[ProbeArg | None, str, str, str | None]] = []
    for arg in spec.args:
        if arg.kind == "params":
            for index, param in enumerate(params):
                fetch, type_ = _btf_fetch(btf, params, index, (), param.name, None, kernel_names, at_exit, _unsigned(spec))
                pairs.append((None, param.name, fetch, type_))
        elif arg.kind == "vars":
            raise UserError("$vars: locals need DWARF", "use $params, or give -k VMLINUX")
        elif arg.kind == "retval" and (arg.type in BARE_INT_TYPES or not (arg.type or spec.perf_dialect)):
            natural = _btf_value_type(btf, btf.return_type(spec.function), _unsigned(spec))
            pairs.append((arg, "retval", "$retval", sized(arg.type, natural) if arg.type else natural))
        elif arg.kind == "var":
            index = next((i for i, p in enumerate(params) if p.name == arg.var), None)
            if index is None:
                raise UserError(f"{arg.var!r}: not a parameter of {btf.prototype(spec.function)}",
                                "without DWARF only parameters can be named; locals need -k VMLINUX")
            fetch, type_ = _btf_fetch(btf, params, index, arg.path, arg.text, arg.type, kernel_names, at_exit, _unsigned(spec))
            pairs.append((arg, default_arg_name(arg), fetch, type_))
        else:
            fetch = _raw_fetch(arg, spec, readme_offers(readme, "arg_n"), None, readme_offers(readme, "return_args"))
            pairs.append((arg, default_arg_name(arg), fetch, arg.type))
    place = module_place(spec, spec.function if spec.kind == "fprobe" else f"{spec.function}+0")
    return CompiledProbe(spec, group, event_name(spec, taken), place, name_fetch_args(pairs, perf=spec.perf_dialect),
                         spec.function, 0)


def _btf_fetch(
    btf, params, index: int, path, what: str, wanted: str | None, kernel_names: bool, at_exit: bool, unsigned: str = "u"
) -> tuple[str, str | None]:
    """(fetch, type) for parameter ``index`` followed by an access path; ``at_exit``: on a return probe."""
    if kernel_names and all(step.op == "->" for step in path) and wanted not in BARE_INT_TYPES:
        return what, wanted  # the kernel resolves names, -> chains and their types from BTF itself
    if at_exit:
        value = f"$arg{index + 1}"  # saved by the kernel at entry: the register is clobbered by now
    elif index >= len(ARG_REGISTERS):
        raise UserError(f"{what}: parameter {index + 1} is passed on the stack", "read it with $stackN")
    else:
        value = f"%{ARG_REGISTERS[index]}"
    type_id = params[index].type_id
    address: tuple[str, int] | None = None  # the object is in memory at value+offset (else in `value`)
    bits: tuple[int, int] | None = None
    done = params[index].name
    for step in path:
        if step.op == "[]":
            raise UserError(f"{done}[{step.index}]: indexing is not compiled from BTF", "give -k VMLINUX")
        if step.op == "->":
            if not btf.is_pointer(type_id):
                raise UserError(f"{done} is {btf.type_name(type_id)}, not a pointer", f"use {done}.{step.member}")
            if address is not None:
                value = f"+{address[1]}({address[0]})"
            base, type_id = (value, 0), btf.pointee(type_id)
        else:
            if btf.is_pointer(type_id):
                raise UserError(f"{done} is a pointer", f"use {done}->{step.member}")
            if address is None:
                raise UserError(f"{done} is passed in a register: its members have no address", "")
            base = address
        [*_, last] = btf.find_member(type_id, step.member)
        type_id = last.member.type_id
        address = (base[0], base[1] + last.byte_offset)
        bits = (last.bit_offset - last.byte_offset * 8, last.bitfield_size) if last.bitfield_size else None
        done += str(step)
    if address is None:
        fetch = value
    elif bits:
        container = btf.size_of(type_id) * 8
        natural = f"b{bits[1]}@{bits[0]}/{container}"
        return f"+{address[1]}({address[0]})", sized(wanted, natural) if wanted else natural
    else:
        fetch = f"+{address[1]}({address[0]})"
    if wanted in ("string", "ustring"):
        return f"+0({fetch})", wanted
    if wanted and wanted not in BARE_INT_TYPES:
        return fetch, wanted
    type_ = _btf_value_type(btf, type_id, unsigned)
    if type_ is None:
        raise UserError(f"{what} is {btf.type_name(type_id)}, not a value of 1, 2, 4 or 8 bytes", f"capture a member: {what}->member")
    return fetch, sized(wanted, type_) if wanted else type_


def _btf_value_type(btf, type_id: int, unsigned: str = "u") -> str | None:
    """s32/u64/x64... for a BTF scalar or pointer; None for void, structs and odd sizes. ``unsigned``:
    the letter for values that are not signed (``x`` in perf's dialect)."""
    if type_id == 0:
        return None
    if btf.is_pointer(type_id):
        return "x64"
    try:
        size, signed = btf.size_of(type_id), btf.is_signed(type_id)
    except UserError:
        return None
    return f"{'s' if signed else unsigned}{size * 8}" if size in (1, 2, 4, 8) else None
