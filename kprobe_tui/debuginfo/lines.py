"""Probeable source lines, decided and printed exactly as `perf probe -L` does.

A line is probeable when an is_stmt line-table row inside the function's ranges starts it (rows
of inlined callees dropped unless they are the call site), or it is the function's declaration or
an inlined call site, and the row's address maps back to that same line and file. perf does this
in util/probe-finder.c (find_line_range) and util/dwarf-aux.c (die_walk_lines); this follows them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from kprobe_tui.debuginfo import dwarfinfo as dw
from kprobe_tui.debuginfo.asking import one_question_at_a_time
from kprobe_tui.debuginfo.corrupt import reports_corruption
from kprobe_tui.debuginfo.locate import default_client, source_path
from kprobe_tui.errors import UserError
from kprobe_tui.files import MiB, read_regular

__all__ = ["INT_MAX", "LineRange", "LineSpec", "MAX_SOURCE", "SourceText", "find_line_range", "line_info", "render",
           "source_lines", "source_text"]

INT_MAX = 2**31 - 1
MAX_SOURCE = 64 * MiB  # the biggest C files (generated tables) are a few MB


def _debug_file(info, *_args, **_kwargs):
    return info.located.debug_file
TRAILING_LINES = 2  # perf's NR_ADDITIONAL_LINES
RANGE_RE = re.compile(r"^(?P<what>[^:]+)(?::(?P<start>\d+)(?:(?P<sep>[-+])(?P<end>\d+))?)?$")


@dataclass
class LineSpec:
    """perf's line range: FUNC[@FILE][:START[-END|+COUNT]] or FILE:START[-END|+COUNT]."""

    function: str | None
    file: str | None
    start: int = 0
    end: int = INT_MAX

    @classmethod
    def parse(cls, text: str) -> LineSpec:
        match = RANGE_RE.match(text)
        if not match:
            raise UserError(f"cannot parse line range {text!r}",
                            "use FUNC, FUNC:START-END, FUNC:START+COUNT, FUNC@FILE or FILE:START-END")
        what = match["what"]
        start = int(match["start"]) if match["start"] else 0
        end = INT_MAX
        if match["end"]:
            end = int(match["end"]) if match["sep"] == "-" else start + int(match["end"]) - 1
        if end < start:
            raise UserError(f"{text!r}: the range ends ({end}) before it starts ({start})", "give START-END with START <= END")
        if "." in what and "@" not in what:
            if not match["start"]:
                raise UserError(f"{text!r}: a file needs a line number", "use FILE:START-END, e.g. tcp.c:100-120")
            return cls(None, what, start, end)
        function, _, file = what.partition("@")
        return cls(function, file or None, start, end)


@dataclass
class LineRange:
    """The result: probeable line numbers (absolute) of one function or file range."""

    spec: LineSpec
    path: str | None  # the file name as DWARF spells it (perf's lr->path)
    cu_offset: int  # the compile unit holding the lines
    comp_dir: str | None  # its DW_AT_comp_dir, to resolve the source path
    offset: int  # the function's declaration line (0 for a file range)
    start: int
    end: int
    lines: list[int] = field(default_factory=list)
    from_inlined: bool = False  # perf finds nothing here; these come from the inlined copies
    info: object = field(default=None, repr=False, compare=False)

    @property
    def comp_dir_cu(self):
        """The pyelftools CU, parsed on first use: printing a saved answer needs only comp_dir."""
        return self.info.cu(self.cu_offset)

    def to_saved(self) -> tuple:
        return (self.cu_offset, self.comp_dir, self.path, self.offset, self.start, self.end, self.lines,
                self.from_inlined)


def walk_lines(info, unit: dw.CUData, scope=None) -> Iterator[tuple[str | None, int, int]]:
    """perf's die_walk_lines: (file, line, address) of a function/inlined copy, or the whole unit."""
    units = info.units
    if scope is None:
        for row in unit.rows:
            if row.is_stmt and not row.end_sequence:
                yield unit.file_name(row.file), row.line, row.address
        for function in unit.functions:
            yield from _function_lines(info, unit, function, recursive=True)
        return
    decl = dw.decl_line(scope)
    decl_index = dw.decl_file_index(scope)
    decl_file = unit.file_name(decl_index)
    if decl_file is None:
        return
    ranges = dw.ranges_of(scope, units)
    inlined = _inlined_in(scope, units)
    for row in unit.rows:
        if row.end_sequence or not row.is_stmt:
            continue
        address = row.address
        if not any(low <= address < high for low, high in ranges):
            continue
        inner = _innermost(inlined, address)
        if inner is not None:
            call_file = unit.file_name(dw.int_attr(inner, "DW_AT_call_file", False))
            is_call_site = call_file == decl_file and dw.int_attr(inner, "DW_AT_call_line", False) == row.line
            if not is_call_site and (dw.decl_line(inner) != decl or dw.decl_file_index(inner) != decl_index):
                continue
        yield unit.file_name(row.file), row.line, address
    yield from _function_lines(info, unit, scope, recursive=False)


def _inlined_in(scope, units: dw.Units) -> list[tuple[int, list[tuple[int, int]], object]]:
    """Every inlined_subroutine below a scope: (depth, ranges, DIE) in depth-first order."""
    found = []

    def walk(die, depth):
        for child in die.iter_children():
            if child.tag == "DW_TAG_inlined_subroutine":
                found.append((depth, dw.ranges_of(child, units), child))
            if child.has_children:
                walk(child, depth + 1)

    walk(scope, 0)
    return found


def _innermost(inlined, address: int):
    best, best_depth = None, -1
    for depth, ranges, die in inlined:
        if depth > best_depth and any(low <= address < high for low, high in ranges):
            best, best_depth = die, depth
    return best


def _function_lines(info, unit: dw.CUData, function, recursive: bool):
    """perf's __die_walk_funclines: the declaration line and inlined call sites, at their entry."""
    units = info.units
    address = dw.entry_pc(function, units)
    fname = unit.file_name(dw.decl_file_index(function))
    if fname and address is not None:
        yield fname, dw.decl_line(function), address

    def visit(die, out):
        address = 0
        if die.tag == "DW_TAG_inlined_subroutine":
            fname = unit.file_name(dw.int_attr(die, "DW_AT_call_file", False))
            lineno = dw.int_attr(die, "DW_AT_call_line", False) or 0
            entry = dw.entry_pc(die, units)
            if fname and lineno > 0 and entry is not None:
                address = entry
                out.append((fname, lineno, entry))
            if not recursive:
                return dw.FIND_SIBLING
        if address:
            fname = unit.file_name(dw.decl_file_index(die))
            if fname:
                out.append((fname, dw.decl_line(die), address))
        return dw.FIND_CONTINUE

    found: list = []
    dw.iter_tree(function, lambda die: visit(die, found))
    yield from found


def line_info(info, unit: dw.CUData, address: int) -> tuple[str | None, int]:
    """perf's cu_find_lineinfo: a function's entry maps to its declaration, else the line row."""
    function = info.real_function_at(unit.cu, address)
    if function is not None and dw.entry_pc(function, info.units) == address:
        return unit.file_name(dw.decl_file_index(function)), dw.decl_line(function)
    row = unit.row_at(address)
    if row is None:
        return None, 0
    return unit.file_name(row.file), row.line


def _collect(info, unit, scopes, fname: str, start: int, end: int, reversible: bool, result: LineRange) -> None:
    lines = set(result.lines)
    previous: tuple[str | None, int] = (None, 0)
    for scope in scopes:
        for file, lineno, address in walk_lines(info, unit, scope):
            if file is None or not dw.strtailcmp(file, fname) or not start <= lineno <= end:
                continue
            if reversible:
                back_file, back_line = line_info(info, unit, address)
                if not back_file or not back_line:
                    # perf's line_range_add_cb leaves its result variables uninitialised when the
                    # lookup fails, so they keep the previous lookup's values: do the same.
                    back_file, back_line = previous
                previous = (back_file, back_line)
                if back_line and back_file and (back_line != lineno or back_file != file):
                    continue
            if result.path is None:
                result.path = file
            lines.add(lineno)
    result.lines = sorted(lines)


@one_question_at_a_time
@reports_corruption(_debug_file)
def find_line_range(info, spec: LineSpec) -> LineRange:
    """The probeable lines of a spec, as perf's debuginfo__find_line_range decides them.

    Answers are kept in the per-build-id index, so asking again skips the line-table walk.
    """
    key = f"lines {spec.function}@{spec.file}:{spec.start}-{spec.end}"
    saved = info.index.answer(key)
    if saved is not None:
        cu_offset, comp_dir, path, offset, start, end, lines, from_inlined = saved
        described = info.index.answer(f"{key} alias of")
        spec = replace(spec, function=described) if described else spec
        return LineRange(spec, path, cu_offset, comp_dir, offset, start, end, lines, from_inlined, info)
    found = _find_line_range(info, spec)
    info.index.save_answer(key, found.to_saved())
    if found.spec.function != spec.function:
        info.index.save_answer(f"{key} alias of", found.spec.function)
    return found


def _find_line_range(info, spec: LineSpec) -> LineRange:
    if spec.function is None:
        assert spec.file is not None, "LineSpec.parse gives a file whenever it gives no function"
        return _file_range(info, spec, spec.file)
    definitions = info.definitions(spec.function, spec.file)
    if not definitions:
        raise UserError(f"function {spec.function!r} not found in the debug info of {info.located.debug_file}",
                        "check the spelling, or give FUNC@FILE for a static function")
    described = dw.name_of(definitions[0])
    if described and described != spec.function:  # an alias (puts): the function's range, under its name
        spec = replace(spec, function=described)
    fallback = None
    for die in definitions:
        unit = info.units.of(die.cu)
        offset = dw.decl_line(die)
        start = min(offset + spec.start, INT_MAX)
        end = min(offset + spec.end, INT_MAX)
        fname = unit.file_name(dw.decl_file_index(die))
        scopes = [die] if dw.is_func_instance(die) else info.instances_of(die)
        result = LineRange(spec, None, die.cu.cu_offset, unit.comp_dir, offset, start, end, info=info)
        if fname:
            _collect(info, unit, scopes, fname, start, end, True, result)
        if result.lines:
            return result
        if fallback is None and fname and scopes:
            fallback = LineRange(spec, None, die.cu.cu_offset, unit.comp_dir, offset, start, end,
                                 from_inlined=True, info=info)
            _collect(info, unit, scopes, fname, start, end, False, fallback)
    if fallback is not None and fallback.lines:
        return fallback
    raise UserError(f"{spec.function}: no probeable source line (its code was optimised away or merged into callers)",
                    "probe a caller instead, or rebuild with less optimisation")


def _file_range(info, spec: LineSpec, file: str) -> LineRange:
    for cu in info.dwarf.iter_CUs():
        unit = info.units.of(cu)
        fname = next((f for f in unit.files if f and dw.strtailcmp(file, f)), None)
        if fname is None:
            continue
        result = LineRange(spec, None, cu.cu_offset, unit.comp_dir, 0, spec.start, spec.end, info=info)
        _collect(info, unit, [None], fname, spec.start, spec.end, True, result)
        if result.lines:
            return result
    raise UserError(f"{spec.file}:{spec.start}: no probeable line there in any compile unit",
                    "check the file name (a tail of the path is enough) and the line numbers")


@dataclass
class SourceText:
    """The source file behind a line range (None when it cannot be found) and what to tell the user."""

    path: str  # the readable file, or DWARF's name for it when missing
    lines: list[str] | None  # with line endings, decoded losslessly (surrogateescape)
    note: str | None


def source_lines(data: bytes) -> list[str]:
    """A file's lines with their endings, split at newlines only, as perf and the line table count them
    (str.splitlines also breaks at form feeds, \\x1c-\\x1e, U+0085 and U+2028, which shifts every line after)."""
    text = data.decode("utf-8", errors="surrogateescape")
    lines = [line + "\n" for line in text.split("\n")]
    lines[-1] = lines[-1][:-1]
    return lines if lines[-1] else lines[:-1]


@reports_corruption(_debug_file)
def source_text(info, found: LineRange, debuginfod=None) -> SourceText:
    """Read the source of a line range as perf resolves it (comp_dir, -s prefix), else from debuginfod
    (``debuginfod``: the caller's client, with its progress and cancel; None: the one ``info`` was opened with)."""
    # find_line_range returns a range only once it holds a line, and the first line found names its file
    assert found.path is not None, "a LineRange with lines has a path"
    dwarf_path = found.path
    source = source_path(dwarf_path, found.comp_dir, info.source_dir)
    notes = []
    if found.from_inlined:
        notes.append(f"{found.spec.function} has no out-of-line copy perf can list: "
                     "these are the lines of its inlined copies")
    remote = None
    if source is None and info.source_dir is None and dwarf_path:
        source, remote = _fetch_source(info, dwarf_path, found.comp_dir, debuginfod or info.debuginfod)
    lines = None
    if source is not None:
        try:
            lines = source_lines(read_regular(source, "source file", MAX_SOURCE))
        except UserError as exc:  # the debug info names it: it may be anything, a FIFO included
            notes.append(exc.message)
    if lines is None:
        why = f"; {remote}" if remote else ""
        notes.append(f"source text not found for {dwarf_path} (pass -s DIR with the source tree{why})")
    return SourceText(source or dwarf_path, lines, "; ".join(notes) or None)


def _fetch_source(info, dwarf_path: str, comp_dir: str | None, debuginfod) -> tuple[str | None, str | None]:
    """(the cached file, None) from debuginfod by the build-id and absolute path, or (None, why not)."""
    from kprobe_tui.debuginfo.debuginfod import Cancelled  # here, not above: the client module costs ~8 ms to import (-X importtime) and most runs never ask it

    build_id = info.located.build_id
    path = dwarf_path if dwarf_path.startswith("/") else f"{comp_dir}/{dwarf_path}" if comp_dir else None
    if not build_id or path is None or not path.startswith("/"):
        return None, None  # debuginfod serves sources by absolute path only
    try:
        return str(default_client(debuginfod).source(build_id, path)), None
    except Cancelled:
        raise
    except UserError as exc:
        return None, f"debuginfod: {exc.message}"


@reports_corruption(_debug_file)
def render(info, found: LineRange) -> tuple[str, str | None]:
    """perf's __show_line_range output, and a note for the user (missing source, fallback) or None."""
    source = source_text(info, found)
    spec = found.spec
    if spec.function is not None:
        header = f"<{spec.function}@{source.path}:{found.start - found.offset}>\n"
    else:
        header = f"<{source.path}:{found.start}>\n"
    text = source.lines
    if text is None:
        return header + "".join(f"{line - found.offset:7d}\n" for line in found.lines), source.note
    out = [header]
    current = found.start if found.start > 0 else 1
    for line in found.lines:
        while line > current:
            if current > len(text):
                return "".join(out), "source file is shorter than the debug info says"
            out.append("         " + text[current - 1])
            current += 1
        if current > len(text):
            return "".join(out), "source file is shorter than the debug info says"
        out.append(f"{current - found.offset:7d}  " + text[current - 1])
        current += 1
    end = current + TRAILING_LINES if found.end == INT_MAX else found.end
    while current <= end and current <= len(text):
        out.append("         " + text[current - 1])
        current += 1
    return "".join(out), source.note
