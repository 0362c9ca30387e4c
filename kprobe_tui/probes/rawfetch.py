"""The raw back-end: probes and fetch-args that need no debug info.

Registers, ``$argN``, ``$retval``, ``$comm``, ``@symbol`` and text written by hand, at a function's
entry, return, offset or an address. The DWARF and BTF back-ends fall back on these fetch-args for
whatever is not a C variable, and share the place of a module's function (``module_place``).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from pathlib import Path

from kprobe_tui.errors import UserError
from kprobe_tui.probes.naming import event_name, name_fetch_args
from kprobe_tui.probes.render import always_quoted, default_arg_name
from kprobe_tui.probes.spec import CompiledProbe, ProbeArg, ProbeSpec
from kprobe_tui.probes.symbols import elf_symbols, symbol_address

# x86_64 System V: integer parameters 1..6.
ARG_REGISTERS = ("di", "si", "dx", "cx", "r8", "r9")


def uprobe_data_fetch(binary: str, data_address: int, probe_address: int) -> str:
    """``@+X`` for a uprobe: the kernel reads at (probe's mapped address - probe's file offset) + X.

    So X is not the data's file offset (data and text segments are shifted differently between
    file and memory); it is the data's address relative to where the probe's segment puts offset 0.
    """
    text_bias = probe_address - elf_symbols(binary).file_offset(probe_address)
    return f"@+{data_address - text_bias}"


def refuse_exit_arguments(spec: ProbeSpec, token: str, return_args: bool) -> None:
    """Arguments at function exit exist only where the kernel saved them at entry: refuse with why, or pass."""
    entry = spec.place_text().removesuffix("%return")
    option = f"-x {shlex.quote(spec.binary)} " if spec.binary is not None else "--fprobe " if spec.kind == "fprobe" else ""
    command = f"kprobe-tui probe {option}{always_quoted(entry)} {always_quoted(token)}"
    if spec.is_uprobe:
        raise UserError(f"{token!r}: uprobes cannot read arguments at function exit "
                        "(the kernel saves entry arguments for kernel return probes only)", f"probe the entry too: {command}")
    if not return_args:
        raise UserError(f"{token!r}: this kernel cannot read arguments at function exit (its tracefs README "
                        "lacks 'return probes support: $retval, $arg<N>')", f"probe the entry too: {command}")


def raw_fetch(
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
            refuse_exit_arguments(spec, str(arg), return_args)
            return f"$arg{arg.index}"
        # uprobes refuse $argN ("only on function entry or exit": they cannot tell), kprobes need README's $arg<N>
        if arg_n_supported and not spec.is_uprobe:
            return f"$arg{arg.index}"
        if arg.index > len(ARG_REGISTERS):
            raise UserError(f"{arg.text!r}: only the first {len(ARG_REGISTERS)} parameters are in registers", "read the stack with $stackN")
        return f"%{ARG_REGISTERS[arg.index - 1]}"
    if arg.kind == "symbol":
        if spec.binary is None:
            return f"@{arg.var}" + (f"{arg.index:+d}" if arg.index else "")
        # uprobes cannot name symbols: compute the address relative to the probed mapping
        assert probe_address is not None, "a uprobe's fetch-args are compiled at its address"
        return uprobe_data_fetch(spec.binary, symbol_address(spec.binary, arg.var) + arg.index, probe_address)
    raise UserError(f"{arg.text!r}: needs debug info to compile", "give a binary with DWARF (-x) or a vmlinux (-k)")


def needs_debuginfo(spec: ProbeSpec) -> bool:
    """C-level variables, source lines and patterns need DWARF (or BTF for kernel entry args)."""
    return spec.kind == "line" or spec.source is not None or any(a.kind in ("var", "params", "vars") for a in spec.args)


def compile_raw(
    spec: ProbeSpec, group: str, taken: Iterable[str] = (), arg_n_supported: bool = True, return_args: bool = False
) -> CompiledProbe:
    """A probe at a function entry/return/offset or address, with register-level args only."""
    if needs_debuginfo(spec):
        raise UserError(f"{spec.place_text()!r} with C variables needs debug info", "compile_dwarf or compile_btf handles it")
    function, function_offset, address = spec.function, spec.offset, None
    if spec.binary is not None:
        symbols = elf_symbols(spec.binary)
        if spec.address is not None:
            address = spec.address
            owner = symbols.containing(address)
            function, function_offset = (owner.name, address - owner.address) if owner else (None, 0)
        else:
            sym = symbols.function(named_function(spec))
            if spec.offset >= max(sym.size, 1):
                raise UserError(f"+{spec.offset}: past the end of {sym.name} ({sym.size} bytes)", "use an offset inside the function")
            address = sym.address + spec.offset
        place = f"{spec.binary}:0x{symbols.file_offset(address):x}"
    elif spec.address is not None:
        place = f"0x{spec.address:x}"
    else:
        place = module_place(spec, f"{spec.function}+{spec.offset}" if spec.kind != "fprobe" else named_function(spec))
    fetches = name_fetch_args(
        ((arg, default_arg_name(arg), raw_fetch(arg, spec, arg_n_supported, address, return_args), arg.type)
         for arg in spec.args),
        perf=spec.perf_dialect,
    )
    return CompiledProbe(spec, group, event_name(spec, taken), place, fetches, function, function_offset)


def named_function(spec: ProbeSpec) -> str:
    """The function the place names: every place but a raw address or SRC:LINE names one."""
    if spec.function is None:
        raise UserError(f"{spec.place_text()!r}: names no function", "probe FUNC, FUNC+OFFSET or FUNC%return")
    return spec.function


def module_place(spec: ProbeSpec, place: str, name: str | None = None) -> str:
    """``MODULE:place`` for a function of a kernel module: the kernel looks the name up in that module only.

    ``name``: the module's name from its debug file (-m may name a file); else the -m word, spelled as the kernel does."""
    if not spec.module:
        return place
    module = name or Path(spec.module).name.split(".", 1)[0].replace("-", "_")
    if not re.fullmatch(r"[A-Za-z0-9_]+", module):  # it goes to kprobe_events, and may come from a file's .modinfo
        raise UserError(f"{module!r}: not a kernel module name", "module names are letters, digits and '_' (lsmod)")
    return f"{module}:{place}"


def unsigned_letter(spec: ProbeSpec) -> str:
    """The type letter for unsigned values: ``u``, or ``x`` as perf writes them."""
    return "x" if spec.perf_dialect else "u"
