"""The BTF back-end: kernel entry and return probes that name parameters, with no DWARF at hand.

BTF names a function's parameters and lays out its structs, so ``sk``, ``skb->len`` or ``$params``
compile to the calling-convention register (or ``$argN``) plus member offsets; anything else falls
back on the raw back-end's fetch-args.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from kprobe_tui.errors import UserError
from kprobe_tui.kernel.btf import Btf, Param
from kprobe_tui.kernel.capabilities import readme_offers
from kprobe_tui.probes.naming import event_name, name_fetch_args
from kprobe_tui.probes.rawfetch import (
    ARG_REGISTERS,
    module_place,
    named_function,
    raw_fetch,
    refuse_exit_arguments,
    unsigned_letter,
)
from kprobe_tui.probes.render import default_arg_name
from kprobe_tui.probes.spec import BARE_INT_TYPES, AccessStep, CompiledProbe, ProbeArg, ProbeSpec, sized


@dataclass(frozen=True)
class BtfFunction:
    """What every fetch-arg of one probe reads through: the function's parameters in BTF, and how to read them.

    ``kernel_names``: the kernel resolves argument names itself (README's ``<argname>``); ``at_exit``:
    on a return probe; ``unsigned``: the letter for values that are not signed (``x`` in perf's dialect)."""

    btf: Btf
    params: list[Param]
    kernel_names: bool
    at_exit: bool
    unsigned: str = "u"


def compile_btf(
    spec: ProbeSpec, group: str, taken: Iterable[str] = (), *, readme: str = "", btf_path: str | Path | None = None
) -> CompiledProbe:
    """Kernel entry and return probes by parameter name with no DWARF: BTF names the parameters and lays out structs.

    Kernels whose README advertises ``<argname>`` (>= 6.5) resolve names and ``->`` chains
    themselves, so those are passed through; otherwise (and for ``.``/``[N]``) parameter N is
    the calling-convention register (``$argN`` at function exit, saved by the kernel at entry)
    and members are offsets from our BTF reader.
    """
    if spec.kind not in ("entry", "return", "fprobe") or spec.source:
        raise UserError(f"{spec.place_text()!r}: without DWARF only parameters at function entry or exit can be named",
                        "give the kernel's debug info: -k /usr/lib/debug/boot/vmlinux-$(uname -r)")
    function = named_function(spec)
    btf = Btf.shared(btf_path)
    if not btf.has_function(function):
        raise UserError(f"{function!r}: not in the kernel's BTF (inlined, or in a module without BTF)",
                        "probe it with registers ($argN, %di) or give -k VMLINUX")
    params = [p for p in btf.params(function) if p.name != "..."]
    btf_function = BtfFunction(btf, params, readme_offers(readme, "btf_args"), spec.is_return, unsigned_letter(spec))
    if spec.is_return:
        asked = next((arg for arg in spec.args if arg.kind in ("params", "var")), None)
        if asked is not None:
            refuse_exit_arguments(spec, str(asked), readme_offers(readme, "return_args"))
    pairs: list[tuple[ProbeArg | None, str, str, str | None]] = []
    for arg in spec.args:
        if arg.kind == "params":
            for index, param in enumerate(params):
                fetch, type_ = _btf_fetch(btf_function, index, (), param.name, None)
                pairs.append((None, param.name, fetch, type_))
        elif arg.kind == "vars":
            raise UserError("$vars: locals need DWARF", "use $params, or give -k VMLINUX")
        elif arg.kind == "retval" and (arg.type in BARE_INT_TYPES or not (arg.type or spec.perf_dialect)):
            natural = _btf_value_type(btf, btf.return_type(function), unsigned_letter(spec))
            pairs.append((arg, "retval", "$retval", sized(arg.type, natural) if arg.type else natural))
        elif arg.kind == "var":
            position = next((i for i, p in enumerate(params) if p.name == arg.var), None)
            if position is None:
                raise UserError(f"{arg.var!r}: not a parameter of {btf.prototype(function)}",
                                "without DWARF only parameters can be named; locals need -k VMLINUX")
            fetch, type_ = _btf_fetch(btf_function, position, arg.path, arg.text, arg.type)
            pairs.append((arg, default_arg_name(arg), fetch, type_))
        else:
            fetch = raw_fetch(arg, spec, readme_offers(readme, "arg_n"), None, readme_offers(readme, "return_args"))
            pairs.append((arg, default_arg_name(arg), fetch, arg.type))
    place = module_place(spec, function if spec.kind == "fprobe" else f"{function}+0")
    return CompiledProbe(spec, group, event_name(spec, taken), place, name_fetch_args(pairs, perf=spec.perf_dialect),
                         function, 0)


def _btf_fetch(
    function: BtfFunction, index: int, path: tuple[AccessStep, ...], what: str, wanted: str | None
) -> tuple[str, str | None]:
    """(fetch, type) for parameter ``index`` followed by an access path."""
    btf, params = function.btf, function.params
    if function.kernel_names and all(step.op == "->" for step in path) and wanted not in BARE_INT_TYPES:
        return what, wanted  # the kernel resolves names, -> chains and their types from BTF itself
    if function.at_exit:
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
    type_ = _btf_value_type(btf, type_id, function.unsigned)
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
