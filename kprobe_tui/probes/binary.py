"""The probeable functions of a user binary (``-x BINARY``), for the function browser.

It answers what the kernel ``Catalog`` answers (``names``, ``status``, ``classify``, ``module``,
``function``, ``notes``, ``details_ready``, ``warm``), so the same screen browses both. The
browser's glyphs and colours are keyed by the kernel's ``Status``; the meanings for a binary are
named below and spelled for the screen in ``labels``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from kprobe_tui.debuginfo import dwarfinfo as dw
from kprobe_tui.debuginfo.corrupt import reports_corruption
from kprobe_tui.elf import SHN_UNDEF, STT_FUNC, STT_GNU_IFUNC, ElfFile
from kprobe_tui.errors import UserError
from kprobe_tui.kernel.catalog import Function, Status, Symbol, clone_reason
from kprobe_tui.machine import require_x86_64_elf
from kprobe_tui.probes.symbols import ELF_READ_ERRORS

# What each Status means for a function of a user binary.
WITH_DEBUG_INFO = Status.FTRACE  # DWARF describes it: arguments and locals by name
WITHOUT_DEBUG_INFO = Status.PROBEABLE  # a uprobe works; values only through registers and $argN
NOT_PROBEABLE = Status.BLACKLISTED

LABELS = {
    WITH_DEBUG_INFO: "debug info",
    WITHOUT_DEBUG_INFO: "registers only",
    Status.CLONE: "clone",
    Status.AMBIGUOUS: "ambiguous",
    NOT_PROBEABLE: "not probeable",
}

DESCRIBED = "described by DWARF: capture arguments and locals by name, and probe source lines"

# Sections whose symbols are call trampolines, not function bodies.
_STUB_SECTIONS = (".plt", ".plt.got", ".plt.sec", ".iplt")


@dataclass(frozen=True)
class _FunctionSymbol:
    address: int
    size: int
    kind: str  # STT_FUNC or STT_GNU_IFUNC
    section: str  # "" for an undefined (imported) symbol


class BinaryCatalog:
    """The FUNC symbols of one ELF file (.symtab and .dynsym), classified for probing."""

    labels = LABELS
    missing_prototype = "(no prototype: no DWARF for this function)"

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).resolve()
        require_x86_64_elf(self.path)
        self.notes: list[str] = []
        self._symbols = _read_function_symbols(self.path)
        self._debuginfo = self._open_debuginfo()  # before any status: rows are classified from two threads
        # a name several files define (static functions) is also one row per file, FUNC@FILE as perf takes it
        self._in_file = {row: symbol for name, symbols in self._symbols.items() if self.defined_count(name) > 1
                         for row, symbol in self._by_source(name, symbols).items()}
        self.names: list[str] = sorted([*self._symbols, *self._in_file])
        # read once here: each read of a section header goes through the file (a DWARF question)
        self._has_aranges = self._debuginfo is not None and _has_section(self._debuginfo, ".debug_aranges")
        self._classified: dict[str, tuple[Status, str]] = {}
        self.details_ready = False  # set by warm(): every name is classified
        self.function = lru_cache(maxsize=1024)(self._function)
        if not self.names:
            self.notes.append(f"{self.path} has no function symbols (stripped of .symtab and exports nothing)")

    def __len__(self) -> int:
        return len(self.names)

    def where(self, function: Function) -> str:
        """What the browser's detail pane says in place of a kernel module."""
        return self.path.name

    def module(self, name: str) -> str:
        return ""  # one file: naming it on every row says nothing

    def status(self, name: str) -> Status:
        return self.classify(name)[0]

    def classify(self, name: str) -> tuple[Status, str]:
        found = self._classified.get(name)
        if found is None:
            found = self._classified[name] = self._classify(name, self._symbols_of(name))
        return found

    def _symbols_of(self, name: str) -> list[_FunctionSymbol]:
        """A name's symbols; a FUNC@FILE row's, its one body."""
        in_file = self._in_file.get(name)
        return [in_file] if in_file is not None else self._symbols.get(name, [])

    def defined_count(self, name: str) -> int:
        """How many function bodies of this name the file defines (a static function of two files: 2);
        imports and PLT stubs are not bodies."""
        return sum(1 for s in self._symbols.get(name, []) if s.section and s.section not in _STUB_SECTIONS)

    def _classify(self, name: str, symbols: list[_FunctionSymbol]) -> tuple[Status, str]:
        if name in self._in_file:
            function, _, source = name.partition("@")
            return WITH_DEBUG_INFO, (f"the {function} of {source} (one of {self.defined_count(function)} functions of "
                                     f"this name), {DESCRIBED}")
        defined = [s for s in symbols if s.section]
        if not defined:
            return NOT_PROBEABLE, (
                "imported: the code is in a shared library this file links against; "
                "probe it there (-x /path/to/the/library)"
            )
        if len(defined) > 1:
            where = ", ".join(f"0x{s.address:x}" for s in defined)
            in_files = [row for row in self._in_file if row.partition("@")[0] == name]
            return Status.AMBIGUOUS, (
                f"{len(defined)} functions share this name ({where}), e.g. static functions of different source files or "
                "symbol versions: probe one by address (0xADDR) or by FUNC@SOURCE"
                + (f", as the rows {' and '.join(in_files)} do" if in_files else "")
            )
        symbol = defined[0]
        if symbol.kind == "STT_GNU_IFUNC":
            return NOT_PROBEABLE, (
                "an ifunc: the symbol is the resolver the dynamic linker calls once to pick an implementation; "
                "probe the implementation it returns instead"
            )
        if symbol.section in _STUB_SECTIONS:
            return NOT_PROBEABLE, f"a stub in {symbol.section} that jumps to the real function: probe that"
        if symbol.size == 0:
            return NOT_PROBEABLE, (
                "size 0 in the symbol table: an assembler label or marker, not a function body; "
                "probe its address (0xADDR) if you know it is code"
            )
        clone = clone_reason(name)
        if clone:
            return Status.CLONE, clone
        if self._has_dwarf_at(symbol.address):
            return WITH_DEBUG_INFO, DESCRIBED
        return WITHOUT_DEBUG_INFO, (
            "no DWARF for it: entry, return and +offset probes work, values through registers, $argN and $retval"
        )

    # --- debug info ----------------------------------------------------------------------------

    def _open_debuginfo(self):
        """The binary's DWARF (its own or a separate debug file), or None with a note saying why.

        From debuginfod only what its cache holds: the source view downloads, with a progress bar."""
        from kprobe_tui.debuginfo.debuginfod import Client  # here: ~4 ms, scope ~16 ms (-X importtime): LABELS and defined_function_names never need them
        from kprobe_tui.debuginfo.scope import open_debuginfo  # (~16 ms, see above)

        try:
            info = open_debuginfo(binary=str(self.path), debuginfod=Client(offline=True))
            info.aranges  # noqa: B018 (a cached property, read for its effect): the address -> unit map every DWARF question starts from
            return info
        except UserError as exc:
            self.notes.append(f"no debug info: {exc.message}")
        except Exception as exc:  # a DWARF layout the reader does not handle must not stop the browser
            self.notes.append(f"debug info unreadable ({type(exc).__name__}: {exc}): registers only")
        return None

    def _by_source(self, name: str, symbols: list[_FunctionSymbol]) -> dict[str, _FunctionSymbol]:
        """``name@file.c`` for each body of ``name``, by the file DWARF declares it in (the name perf's FUNC@SRC
        matches as a path's tail); none unless each body has a file of its own (symbol versions have not)."""
        info = self._debuginfo
        if info is None:
            return {}
        at = {s.address: s for s in symbols if s.section}
        found: dict[str, _FunctionSymbol] = {}
        try:
            with info.asking():
                for die in info.definitions(name):
                    low = die.attributes.get("DW_AT_low_pc")
                    declared = info.units.of(die.cu).file_name(dw.decl_file_index(die))
                    if low is not None and low.value in at and declared:
                        found[f"{name}@{Path(declared).name}"] = at[low.value]
        except UserError:  # corrupt DWARF: the name stays one ambiguous row
            return {}
        return found if len(found) == len(at) and len(set(found.values())) == len(at) else {}

    def _has_dwarf_at(self, address: int) -> bool:
        info = self._debuginfo
        if info is None:
            return False
        # Without .debug_aranges the units cannot be told apart cheaply: the file's DWARF is trusted.
        return info.aranges.cu_at(address) is not None or not self._has_aranges

    def prototype(self, name: str) -> str | None:
        """``int work(struct rec* rec, int n)`` from DWARF, or None without it (or when it is corrupt)."""
        if self.status(name) is not WITH_DEBUG_INFO:
            return None
        try:
            return self._prototype(name)
        except UserError:
            return None

    @reports_corruption(lambda self, name: self.path)
    def _prototype(self, name: str) -> str | None:
        with self._debuginfo.asking():  # the parameters are read through the function's DIE
            return self._spelled_prototype(name)

    def _spelled_prototype(self, name: str) -> str | None:
        function, _, source = name.partition("@")  # a FUNC@FILE row: that file's
        sites = self._debuginfo.function(function, source or None)
        if not sites:
            return None
        die = sites[0].die
        if die.tag == "DW_TAG_inlined_subroutine" or "DW_AT_abstract_origin" in die.attributes:
            die = dw.ref(die, "DW_AT_abstract_origin") or die
        params = []
        for child in die.iter_children() if die.has_children else ():
            if child.tag == "DW_TAG_formal_parameter":
                params.append(f"{_spelled_type(child)} {dw.name_of(child) or ''}".rstrip())
            elif child.tag == "DW_TAG_unspecified_parameters":
                params.append("...")
        return f"{_spelled_type(die)} {function}({', '.join(params) or 'void'})"

    def _function(self, name: str) -> Function:
        symbols = [s for s in self._symbols_of(name) if s.section] or self._symbols_of(name)
        status, reason = self.classify(name)
        size = symbols[0].size if len(symbols) == 1 and symbols[0].section else None
        return Function(name, "", tuple(Symbol(s.address, "") for s in symbols), size, status, reason, self.prototype(name))

    def warm(self) -> None:
        """Classify every name (a DWARF address lookup each): for a background thread, after the list is shown."""
        for name in self.names:
            self.classify(name)
        self.details_ready = True


def _has_section(info, name: str) -> bool:
    with info.asking():
        return info.elf.get_section_by_name(name) is not None


def _spelled_type(die) -> str:
    """perf's type spelling; DWARF has no type for void, and perf spells no void pointer."""
    if "DW_AT_type" not in die.attributes:
        return "void"
    return dw.type_name(die) or "void*"


def defined_function_names(path: str | Path) -> list[str]:
    """The name of each function body the file defines, once per body, imports and PLT stubs left out:
    what ``perf probe -x BIN -F`` lists, read from the symbol tables alone (no DWARF: a fifth of the time)."""
    path = Path(path).resolve()
    require_x86_64_elf(path)
    return [name for name, symbols in _read_function_symbols(path).items()
            for s in symbols if s.section and s.section not in _STUB_SECTIONS]


def _read_function_symbols(path: Path) -> dict[str, list[_FunctionSymbol]]:
    """name -> its FUNC/IFUNC symbols, one per address (.symtab and .dynsym repeat each other)."""
    found: dict[str, list[_FunctionSymbol]] = defaultdict(list)
    try:
        elf = ElfFile(path, what="-x file")
        sections = [section.name for section in elf.sections]
        for table_name in (".symtab", ".dynsym"):
            table = elf.symbols(table_name)
            strings = table.strings if table is not None else b""
            for name_at, info, _other, index, value, size in table.rows() if table is not None else ():
                kind = _SYMBOL_TYPES.get(info & 0xF)
                if kind is None or not name_at:
                    continue
                name = strings[name_at : strings.find(b"\0", name_at)].decode(errors="replace")  # SymbolTable.name
                name = name.split("@", 1)[0]  # .symtab spells versions: printf@GLIBC_2.2.5
                same = found[name]
                if index == SHN_UNDEF:  # imported
                    if not same:
                        same.append(_FunctionSymbol(0, 0, kind, ""))
                    continue
                symbol = _FunctionSymbol(value, size, kind, sections[index] if index < len(sections) else "*ABS*")
                if all(s.address != symbol.address or not s.section for s in same):
                    same[:] = [s for s in same if s.section] + [symbol]
    except ELF_READ_ERRORS as exc:  # a symbol table whose offsets and lengths lead nowhere
        raise UserError(f"{str(path)!r}: not a readable ELF file ({type(exc).__name__}: {exc})",
                        "-x takes a compiled program or shared library") from None
    return dict(found)


_SYMBOL_TYPES = {STT_FUNC: "STT_FUNC", STT_GNU_IFUNC: "STT_GNU_IFUNC"}
