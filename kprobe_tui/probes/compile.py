"""From a ProbeSpec to what the kernel takes: the place and the fetch-args.

Kernel probes and uprobes go through the same code: only the place differs (``func+off`` vs
``/path:0xFILEOFFSET``) and what a fetch-arg may name (uprobes cannot take ``@symbol``, they take
``@+FILEOFFSET``). C-level variables are compiled from DWARF (``compile_dwarf``) or, for kernel
entry probes without debug info, from BTF (``compile_btf``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from kprobe_tui.errors import UserError
from kprobe_tui.probes.render import default_arg_name, default_event_name, unique_name
from kprobe_tui.probes.spec import (
    MAX_ARG_NAME_LEN,
    MAX_EVENT_NAME_LEN,
    MAX_TRACE_ARGS,
    CompiledProbe,
    FetchArg,
    ProbeArg,
    ProbeSpec,
)

# x86_64 System V: integer parameters 1..6.
ARG_REGISTERS = ("di", "si", "dx", "cx", "r8", "r9")


@dataclass(frozen=True)
class ElfSymbol:
    name: str
    address: int  # virtual address in the file
    size: int
    file_offset: int  # what a uprobe place needs


class ElfSymbols:
    """Function symbols of one ELF file and the virtual-address -> file-offset map of its segments."""

    def __init__(self, path: str | Path) -> None:
        from elftools.common.exceptions import ELFError
        from elftools.elf.elffile import ELFFile

        self.path = Path(path)
        try:
            with open(self.path, "rb") as stream:
                elf = ELFFile(stream)
                self.segments = [
                    (seg["p_vaddr"], seg["p_filesz"], seg["p_offset"])
                    for seg in elf.iter_segments()
                    if seg["p_type"] == "PT_LOAD"
                ]
                self.functions: dict[str, list[ElfSymbol]] = {}
                for section_name in (".symtab", ".dynsym"):
                    section = elf.get_section_by_name(section_name)
                    if section is None:
                        continue
                    for sym in section.iter_symbols():
                        if sym["st_info"]["type"] not in ("STT_FUNC", "STT_GNU_IFUNC") or not sym["st_value"]:
                            continue
                        same = self.functions.setdefault(sym.name, [])
                        if all(s.address != sym["st_value"] for s in same):
                            offset = self.file_offset(sym["st_value"])
                            same.append(ElfSymbol(sym.name, sym["st_value"], sym["st_size"], offset))
        except FileNotFoundError:
            raise UserError(f"{str(path)!r}: no such file", "give the path of an executable or shared library") from None
        except (ELFError, OSError) as exc:
            raise UserError(f"{str(path)!r}: not a readable ELF file ({exc})", "give an executable or shared library") from None

    def file_offset(self, address: int) -> int:
        """Where a virtual address sits in the file: uprobes are placed by file offset."""
        for vaddr, filesz, offset in self.segments:
            if vaddr <= address < vaddr + filesz:
                return address - vaddr + offset
        raise UserError(f"0x{address:x} is in no loadable segment of {self.path}", "probe an address inside the code")

    def function(self, name: str) -> ElfSymbol:
        found = self.functions.get(name)
        if not found:
            raise UserError(
                f"{name!r}: no such function in {self.path}",
                f"list them with: kprobe-tui funcs -x {self.path}, or nm -D {self.path}",
            )
        if len(found) > 1:
            where = ", ".join(f"0x{s.address:x}" for s in found)
            raise UserError(f"{name!r}: {len(found)} functions share this name in {self.path} ({where})", "probe by FUNC@SRC or by address")
        return found[0]

    def containing(self, address: int) -> ElfSymbol | None:
        """The function an address is in, for naming the place the way perf and bpftrace do."""
        for symbols in self.functions.values():
            for sym in symbols:
                if sym.address <= address < sym.address + max(sym.size, 1):
                    return sym
        return None


@lru_cache(maxsize=16)
def elf_symbols(path: str) -> ElfSymbols:
    return ElfSymbols(path)


def _raw_fetch(arg: ProbeArg, spec: ProbeSpec, arg_n_supported: bool) -> str:
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
        if arg_n_supported:
            return f"$arg{arg.index}"
        if arg.index > len(ARG_REGISTERS):
            raise UserError(f"{arg.text!r}: only the first {len(ARG_REGISTERS)} parameters are in registers", "read the stack with $stackN")
        return f"%{ARG_REGISTERS[arg.index - 1]}"
    if arg.kind == "symbol":
        if not spec.is_uprobe:
            return f"@{arg.var}" + (f"{arg.index:+d}" if arg.index else "")
        # uprobes cannot name symbols; @+OFFSET reads the file's data at that offset once mapped.
        target = _data_symbol_offset(spec.binary, arg.var) + arg.index
        return f"@+{target}"
    raise UserError(f"{arg.text!r}: needs debug info to compile", "give a binary with DWARF (-x) or a vmlinux (-k)")


def _data_symbol_offset(binary: str, name: str) -> int:
    from elftools.elf.elffile import ELFFile

    with open(binary, "rb") as stream:
        elf = ELFFile(stream)
        for section_name in (".symtab", ".dynsym"):
            section = elf.get_section_by_name(section_name)
            for sym in section.get_symbol_by_name(name) or () if section else ():
                if sym["st_value"]:
                    return elf_symbols(binary).file_offset(sym["st_value"])
    raise UserError(f"@{name}: no such symbol in {binary}", f"list them with: nm {binary}")


def needs_debuginfo(spec: ProbeSpec) -> bool:
    """C-level variables, source lines and patterns need DWARF (or BTF for kernel entry args)."""
    return spec.kind == "line" or spec.source is not None or any(a.kind in ("var", "params", "vars") for a in spec.args)


def name_fetch_args(pairs: Iterable[tuple[ProbeArg | None, str, str, str | None]]) -> tuple[FetchArg, ...]:
    """(source, default name, fetch, type) -> FetchArgs with unique kernel-valid names; user names win."""
    pairs = list(pairs)
    if len(pairs) > MAX_TRACE_ARGS:
        raise UserError(f"{len(pairs)} arguments: the kernel takes at most {MAX_TRACE_ARGS}", "capture fewer values")
    user_names = [src.name for src, *_ in pairs if src is not None and src.name]
    duplicate = next((n for n in user_names if user_names.count(n) > 1), None)
    if duplicate:
        raise UserError(f"{duplicate!r}: two arguments have this name", "give each NAME= once")
    names: list[str] = []
    for src, base, _, _ in pairs:
        if src is not None and src.name:
            names.append(src.name)
        else:  # defaults step aside for user-given names, which are kept verbatim
            names.append(unique_name(base, set(names) | set(user_names), MAX_ARG_NAME_LEN))
    return tuple(FetchArg(name, fetch, type_, src) for name, (src, _, fetch, type_) in zip(names, pairs))


def event_name(spec: ProbeSpec, taken: Iterable[str], line: int | None = None) -> str:
    """The user's event name (refused if taken), or a default made unique in the group."""
    taken = set(taken)
    if spec.event:
        if spec.event in taken:
            raise UserError(f"{spec.event!r}: an event of that name exists in group {spec.group!r}", "pick another EVENT= name, or del it first")
        return spec.event
    return unique_name(default_event_name(spec, line), taken, MAX_EVENT_NAME_LEN)


def compile_raw(spec: ProbeSpec, group: str, taken: Iterable[str] = (), arg_n_supported: bool = True) -> CompiledProbe:
    """A probe at a function entry/return/offset or address, with register-level args only."""
    if needs_debuginfo(spec):
        raise UserError(f"{spec.place_text()!r} with C variables needs debug info", "compile_dwarf or compile_btf handles it")
    function, function_offset = spec.function, spec.offset
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
        place = f"{spec.function}+{spec.offset}" if spec.kind != "fprobe" else spec.function
    fetches = name_fetch_args(
        (arg, default_arg_name(arg), _raw_fetch(arg, spec, arg_n_supported), arg.type) for arg in spec.args
    )
    return CompiledProbe(spec, group, event_name(spec, taken), place, fetches, function, function_offset)
