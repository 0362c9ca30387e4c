"""DWARF locations and types -> tracefs fetch-args (x86_64).

A fetch-arg can read a register (``%di``), memory at a register plus a constant (``+8(%di)``),
chains of those (``+0(+8(%di))``), a symbol (``@sym+off``, kernel only), memory relative to the
probed file (``@+X``, uprobes), or an immediate (``\\1``). It cannot add two runtime values or
compute. So a DWARF expression is evaluated symbolically: each stack entry is "a fetch-arg's
value plus a constant"; what does not fit is refused with the reason, never truncated (perf
keeps only the first op and captures wrong values).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from kprobe_tui.debuginfo.dwarfinfo import attr, int_attr, name_of, ref
from kprobe_tui.debuginfo.leb128 import uleb128
from kprobe_tui.errors import UserError
from kprobe_tui.probes.spec import BARE_INT_TYPES, AccessStep, sized

# DWARF register numbers on x86_64 (System V psABI, figure 3.36).
DWARF_REGISTERS = ("ax", "dx", "cx", "bx", "si", "di", "bp", "sp", *(f"r{n}" for n in range(8, 16)), "ip")

_QUALIFIERS = {"DW_TAG_typedef", "DW_TAG_const_type", "DW_TAG_volatile_type", "DW_TAG_restrict_type",
               "DW_TAG_atomic_type", "DW_TAG_immutable_type"}
_SIGNED = {0x5, 0x6, 0xD}  # DW_ATE_signed, signed_char, signed_fixed
_CHARS = {0x6, 0x8}  # DW_ATE_signed_char, unsigned_char
_FLOAT = {0x4, 0x9}  # DW_ATE_float, complex_float
MAX_ARRAY = 64  # the kernel's limit on <type>[N]


class NotExpressible(UserError):
    """A location or type a fetch-arg cannot express; the message says which part and why."""


@dataclass(frozen=True)
class Value:
    """A runtime value: ``fetch`` (None for a plain constant) plus ``const``."""

    fetch: str | None
    const: int = 0

    def plus(self, n: int) -> Value:
        return Value(self.fetch, self.const + n)


def deref_fetch(address: Value, absolute: Callable[[int], str]) -> str:
    """The fetch-arg reading memory at ``address``: ``+c(f)``, or ``absolute(c)`` for a constant address."""
    if address.fetch is None:
        return absolute(address.const)
    sign = "-" if address.const < 0 else "+"
    return f"{sign}{abs(address.const)}({address.fetch})"


@dataclass(frozen=True)
class Located:
    """Where a variable's value is: in memory at ``address``, or directly ``value`` (register/computed)."""

    address: Value | None = None
    value: str | None = None


def _reg(number: int, what: str) -> str:
    if not 0 <= number < len(DWARF_REGISTERS) - 1:
        raise NotExpressible(f"{what}: DWARF register {number} has no tracefs name", "probe another variable or line")
    return DWARF_REGISTERS[number]


def evaluate(
    ops: list,
    what: str,
    *,
    frame_base: Callable[[], Value] | None = None,
    cfa: Callable[[], Value] | None = None,
    absolute: Callable[[int], str],
) -> Located:
    """Evaluate a DWARF location expression (list of (op_name, args)) symbolically."""
    stack: list[Value] = []
    located: Located | None = None
    pieces = 0

    def refuse(reason: str) -> NotExpressible:
        shown = " ".join(name.removeprefix("DW_OP_") + (f"({','.join(map(str, args))})" if args else "") for name, args in ops)
        return NotExpressible(f"{what}: location [{shown}] {reason}", "fetch-args can read registers and memory at register+constant only")

    for index, (name, args) in enumerate(ops):
        if located is not None and name != "DW_OP_piece":
            raise refuse("goes on after the value is complete")
        if name.startswith("DW_OP_reg") and name != "DW_OP_regval_type":
            number = args[0] if name == "DW_OP_regx" else int(name.removeprefix("DW_OP_reg"))
            located = Located(value=f"%{_reg(number, what)}")
        elif name.startswith("DW_OP_breg"):
            number, offset = (args[0], args[1]) if name == "DW_OP_bregx" else (int(name.removeprefix("DW_OP_breg")), args[0])
            stack.append(Value(f"%{_reg(number, what)}", offset))
        elif name == "DW_OP_fbreg":
            if frame_base is None:
                raise refuse("needs the function's frame base, which is unknown")
            stack.append(frame_base().plus(args[0]))
        elif name == "DW_OP_call_frame_cfa":
            if cfa is None:
                raise refuse("needs the CFA, which the call-frame information does not give here")
            stack.append(cfa())
        elif name == "DW_OP_addr":
            stack.append(Value(None, args[0]))
        elif name.startswith("DW_OP_lit"):
            stack.append(Value(None, int(name.removeprefix("DW_OP_lit"))))
        elif name.startswith("DW_OP_const") and name[-1] in "us":  # const1u..const8s, constu, consts
            stack.append(Value(None, args[0]))
        elif name == "DW_OP_plus_uconst" and stack:
            stack.append(stack.pop().plus(args[0]))
        elif name in ("DW_OP_plus", "DW_OP_minus") and len(stack) >= 2:
            right, left = stack.pop(), stack.pop()
            if right.fetch is not None and (name == "DW_OP_minus" or left.fetch is not None):
                raise refuse("adds two runtime values")
            if name == "DW_OP_minus":
                stack.append(left.plus(-right.const))
            else:
                stack.append(left.plus(right.const) if right.fetch is None else right.plus(left.const))
        elif name == "DW_OP_deref" and stack:
            stack.append(Value(deref_fetch(stack.pop(), absolute)))
        elif name == "DW_OP_stack_value" and stack:
            top = stack.pop()
            if top.fetch is None:
                located = Located(value=f"\\{top.const}")
            elif top.const == 0:
                located = Located(value=top.fetch)
            else:
                raise refuse(f"is computed ({top.fetch} {top.const:+d}): fetch-args cannot add to a value")
        elif name == "DW_OP_implicit_value":
            located = Located(value=f"\\{int.from_bytes(bytes(args[1]), 'little', signed=True)}")
        elif name == "DW_OP_piece":
            pieces += 1
            if pieces > 1 or index != len(ops) - 1:
                raise refuse("is split into pieces (parts in different registers/memory)")
            if located is None and stack:
                located = Located(address=stack.pop())
        elif name in ("DW_OP_entry_value", "DW_OP_GNU_entry_value"):
            raise refuse("is the value the variable had at function entry, which is no longer anywhere")
        elif name in ("DW_OP_implicit_pointer", "DW_OP_GNU_implicit_pointer"):
            raise refuse("points to an optimised-out object")
        else:
            raise refuse(f"uses {name}, which fetch-args cannot express")
    if located is None:
        if len(stack) != 1:
            raise refuse("is empty or malformed")
        located = Located(address=stack.pop())
    return located


# -- types ------------------------------------------------------------------------------------


def type_of(die):
    """The DIE's DW_AT_type (through abstract origins), or None for void."""
    return ref(die, "DW_AT_type") if die is not None else None


def strip(type_die):
    """Follow typedef/const/volatile/restrict chains to the real type."""
    while type_die is not None and type_die.tag in _QUALIFIERS:
        type_die = type_of(type_die)
    return type_die


def type_name(type_die) -> str:
    """A C spelling good enough for messages: ``struct record *``, ``int``, ``char[8]``."""
    if type_die is None:
        return "void"
    tag, name = type_die.tag, name_of(type_die)
    if name:
        prefix = {"DW_TAG_structure_type": "struct ", "DW_TAG_union_type": "union ", "DW_TAG_enumeration_type": "enum "}
        return prefix.get(tag, "") + name
    if tag == "DW_TAG_pointer_type":
        return type_name(type_of(type_die)) + " *"
    if tag in _QUALIFIERS:
        return type_name(type_of(type_die))
    if tag == "DW_TAG_array_type":
        return f"{type_name(type_of(type_die))}[{array_length(type_die) or ''}]"
    return {"DW_TAG_structure_type": "struct <anonymous>", "DW_TAG_union_type": "union <anonymous>"}.get(tag, tag)


def size_of(type_die) -> int:
    real = strip(type_die)
    if real is None:
        raise NotExpressible("void has no size")
    if real.tag == "DW_TAG_array_type":
        return (array_length(real) or 0) * size_of(type_of(real))
    size = int_attr(real, "DW_AT_byte_size")
    if size is None and real.tag == "DW_TAG_pointer_type":
        return 8
    if size is None:
        raise NotExpressible(f"{type_name(type_die)} has no size in the debug info (incomplete type)")
    return size


def array_length(array_die) -> int | None:
    for sub in array_die.iter_children():
        if sub.tag == "DW_TAG_subrange_type":
            count = int_attr(sub, "DW_AT_count")
            upper = int_attr(sub, "DW_AT_upper_bound")
            return count if count is not None else upper + 1 if upper is not None else None
    return None


def is_char(type_die) -> bool:
    real = strip(type_die)
    return real is not None and real.tag == "DW_TAG_base_type" and int_attr(real, "DW_AT_encoding") in _CHARS


def fetch_type(type_die, what: str, unsigned: str = "u") -> str:
    """The tracefs type for a value of this C type: s32, u8, x64, s16[4]...

    ``unsigned`` is the letter for values that are not signed: ``u``, or ``x`` as perf gives them
    (perf's convert_variable_type: signed only by DW_AT_encoding, so enums, bools and floats are ``x``)."""
    real = strip(type_die)
    if real is None:
        raise NotExpressible(f"{what} is void", "cast it by giving a type, e.g. :x64")
    if real.tag in ("DW_TAG_pointer_type", "DW_TAG_reference_type", "DW_TAG_rvalue_reference_type", "DW_TAG_ptr_to_member_type"):
        return "x64"
    if real.tag == "DW_TAG_array_type":
        count = array_length(real)
        element = fetch_type(type_of(real), what, unsigned)
        if not count or count > MAX_ARRAY or "[" in element:
            raise NotExpressible(f"{what} is {type_name(type_die)}: the kernel reads arrays of 1..{MAX_ARRAY} scalars",
                                 f"capture one element, e.g. {what}[0]")
        return f"{element}[{count}]"
    if real.tag in ("DW_TAG_structure_type", "DW_TAG_union_type", "DW_TAG_class_type"):
        raise NotExpressible(f"{what} is a {type_name(type_die)}, not a value", f"capture a member: {what}.member")
    size = size_of(real)
    if size not in (1, 2, 4, 8):
        raise NotExpressible(f"{what} is {size} bytes ({type_name(type_die)}): fetch-args read 1, 2, 4 or 8", "capture a part of it")
    if real.tag == "DW_TAG_enumeration_type":
        if unsigned == "x":
            return f"x{size * 8}"  # an enum has no encoding of its own: perf shows it unsigned
        signed = int_attr(strip(type_of(real)), "DW_AT_encoding") in _SIGNED if type_of(real) is not None else False
    elif real.tag == "DW_TAG_base_type":
        encoding = int_attr(real, "DW_AT_encoding")
        if encoding in _FLOAT:
            return f"x{size * 8}"  # no float type in tracefs: the raw bits
        signed = encoding in _SIGNED
    else:
        raise NotExpressible(f"{what} has type {type_name(type_die)}, which has no tracefs type", "give a type, e.g. :x64")
    return f"{'s' if signed else unsigned}{size * 8}"


# -- members ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class LocatedMember:
    """A member found by name, with its offset from the start of the outer struct."""

    die: Any
    byte_offset: int
    bit_offset: int | None = None  # bitfields: LSB-first bit position from the outer struct start
    bit_size: int | None = None

    @property
    def bits(self) -> tuple[int, int] | None:
        """(bit offset, bit size) of a bitfield; None for a member of whole bytes."""
        return None if self.bit_offset is None or self.bit_size is None else (self.bit_offset, self.bit_size)


def _member_location(die) -> int:
    value = attr(die, "DW_AT_data_member_location")
    location = value.value if value is not None else 0  # unions: every member at 0
    if isinstance(location, list):  # DWARF 2 style: [DW_OP_plus_uconst, N]
        if len(location) >= 2 and location[0] == 0x23:  # ULEB128 operand
            return uleb128(bytes(location[1:]), 0)[0]
        raise NotExpressible("a member location expression other than plus_uconst")
    return location


def _bitfield(die, base: int) -> tuple[int, int] | None:
    """(bit position from struct start, width) for bitfield members; DWARF 4 and 5 spellings."""
    width = int_attr(die, "DW_AT_bit_size")
    if width is None:
        return None
    data_bit_offset = int_attr(die, "DW_AT_data_bit_offset")
    if data_bit_offset is not None:  # DWARF 4+/5: counted from the struct start, LSB first
        return base * 8 + data_bit_offset, width
    # DWARF 2-4: DW_AT_bit_offset counts from the MSB of a storage unit at data_member_location
    unit_bytes = int_attr(die, "DW_AT_byte_size") or size_of(type_of(die))
    msb_offset = int_attr(die, "DW_AT_bit_offset") or 0
    return (base + _member_location(die)) * 8 + unit_bytes * 8 - msb_offset - width, width


def find_member(struct_die, name: str, what: str, base: int = 0) -> LocatedMember:
    """A member by name, also inside anonymous structs and unions."""
    real = strip(struct_die)
    if real is None or real.tag not in ("DW_TAG_structure_type", "DW_TAG_union_type", "DW_TAG_class_type"):
        raise NotExpressible(f"{what}: {type_name(struct_die)} is not a struct or union", "use -> through pointers, . on structs")
    found = _search_member(real, name, base)
    if found is None:
        names = sorted(member_names(real))
        raise NotExpressible(f"{what}: {type_name(struct_die)} has no member {name!r}",
                             f"its members: {', '.join(names[:20])}{' ...' if len(names) > 20 else ''}")
    return found


def _search_member(real, name: str, base: int) -> LocatedMember | None:
    for child in real.iter_children():
        if child.tag != "DW_TAG_member":
            continue
        child_name = name_of(child)
        if child_name is None:  # anonymous struct/union: its members are ours
            inner = strip(type_of(child))
            if inner is not None and inner.tag in ("DW_TAG_structure_type", "DW_TAG_union_type"):
                found = _search_member(inner, name, base + _member_location(child))
                if found:
                    return found
            continue
        if child_name == name:
            bits = _bitfield(child, base)
            if bits:
                return LocatedMember(child, base, bits[0], bits[1])
            return LocatedMember(child, base + _member_location(child))
    return None


def member_names(real) -> list[str]:
    """A struct's member names in declaration order, anonymous structs and unions flattened into them."""
    names = []
    for child in real.iter_children():
        if child.tag == "DW_TAG_member":
            name = name_of(child)
            if name is None:
                inner = strip(type_of(child))
                names += member_names(inner) if inner is not None else []
            else:
                names.append(name)
    return names


def bitfield_fetch(address: Value, bit_position: int, width: int, type_die, absolute) -> tuple[str, str]:
    """(fetch, type) for a bitfield: the container read at an aligned byte offset, ``b<w>@<o>/<c>``."""
    container = max(8, size_of(type_die) * 8)
    while True:
        start = bit_position // container * container
        if bit_position - start + width <= container:
            break
        if container == 64:
            raise NotExpressible(f"bitfield straddles 64-bit words ({width} bits at bit {bit_position})")
        container *= 2
    fetch = deref_fetch(address.plus(start // 8), absolute)
    return fetch, f"b{width}@{bit_position - start}/{container}"


# -- access paths -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Object:
    """A C object reached by an access path: its type, and where it is (memory or a value)."""

    type_die: Any
    located: Located
    bits: tuple[int, int] | None = None  # (bit position from located.address, width) for bitfields


def walk(obj: Object, path: tuple[AccessStep, ...], what: str, absolute) -> Object:
    """Follow ``->m``, ``.m`` and ``[n]`` from a variable to the object they name."""
    done = what
    for step in path:
        real = strip(obj.type_die)
        if obj.bits:
            raise NotExpressible(f"{done} is a bitfield: it has no members")
        if step.op == "->" or (step.op == "[]" and real is not None and real.tag == "DW_TAG_pointer_type"):
            if real is None or real.tag != "DW_TAG_pointer_type":
                raise NotExpressible(f"{done} is {type_name(obj.type_die)}, not a pointer", f"use {done}.{step.member}")
            pointer = _value_fetch(obj, absolute)
            target = type_of(real)
            if step.op == "->":
                member = find_member(target, step.member, f"{done}->{step.member}")
                obj = _member_object(member, Value(pointer, 0))
            else:
                element = Value(pointer, step.index * size_of(target))
                obj = Object(target, Located(address=element))
        elif step.op == ".":
            if real is not None and real.tag == "DW_TAG_pointer_type":
                raise NotExpressible(f"{done} is a pointer", f"use {done}->{step.member}")
            member = find_member(obj.type_die, step.member, f"{done}.{step.member}")
            if obj.located.address is None:
                raise NotExpressible(f"{done} is held in a register, not memory: its members have no address")
            obj = _member_object(member, obj.located.address)
        else:  # [] on an array
            if real is None or real.tag != "DW_TAG_array_type":
                raise NotExpressible(f"{done} is {type_name(obj.type_die)}: only arrays and pointers take [N]")
            count = array_length(real)
            if count is not None and step.index >= count:
                raise NotExpressible(f"{done}[{step.index}] is past the end of {type_name(obj.type_die)}", f"index 0..{count - 1}")
            if obj.located.address is None:
                raise NotExpressible(f"{done} is held in a register, not memory")
            element = type_of(real)
            obj = Object(element, Located(address=obj.located.address.plus(step.index * size_of(element))))
        done += str(step)
    return obj


def _member_object(member: LocatedMember, base: Value) -> Object:
    if member.bits is not None:
        return Object(type_of(member.die), Located(address=base), member.bits)
    return Object(type_of(member.die), Located(address=base.plus(member.byte_offset)))


def _value_fetch(obj: Object, absolute) -> str:
    if obj.located.value is not None:
        return obj.located.value
    assert obj.located.address is not None  # a place is a value or an address
    return deref_fetch(obj.located.address, absolute)


def object_fetch(obj: Object, what: str, wanted_type: str | None, absolute, unsigned: str = "u") -> tuple[str, str, list[str]]:
    """(fetch, type, notes) for the final object of a path; ``wanted_type`` is the user's :TYPE (a bare
    ``x``/``u``/``s`` takes the object's width); ``unsigned`` as for ``fetch_type``."""
    notes: list[str] = []
    if obj.bits:
        assert obj.located.address is not None  # a bitfield is a member: in memory
        fetch, bit_type = bitfield_fetch(obj.located.address, obj.bits[0], obj.bits[1], obj.type_die, absolute)
        real = strip(obj.type_die)
        if real is not None and int_attr(real, "DW_AT_encoding") in _SIGNED:
            notes.append(f"{what} is a signed bitfield: the kernel shows its {obj.bits[1]} bits unsigned")
        return fetch, sized(wanted_type, bit_type) if wanted_type else bit_type, notes
    real = strip(obj.type_die)
    if wanted_type in ("string", "ustring"):
        if real is not None and real.tag == "DW_TAG_array_type" and obj.located.address is not None:
            return deref_fetch(obj.located.address, absolute), wanted_type, notes  # char[N]: the bytes in place
        if real is not None and real.tag == "DW_TAG_pointer_type":
            if not is_char(type_of(real)):
                notes.append(f"{what} points to {type_name(type_of(real))}, read as a string anyway")
            return f"+0({_value_fetch(obj, absolute)})", wanted_type, notes
        raise NotExpressible(f"{what} is {type_name(obj.type_die)}: only char * and char[] can be read as a string",
                             f"drop :{wanted_type}")
    fetch = _value_fetch(obj, absolute)
    if wanted_type in BARE_INT_TYPES:
        return fetch, sized(wanted_type, fetch_type(obj.type_die, what, unsigned)), notes
    if wanted_type:
        return fetch, wanted_type, notes
    if real is not None and real.tag == "DW_TAG_array_type" and obj.located.address is None:
        raise NotExpressible(f"{what} is an array held outside memory")
    return fetch, fetch_type(obj.type_die, what, unsigned), notes


# -- call-frame information -------------------------------------------------------------------


@lru_cache(maxsize=8)
def _fde_table(path: str) -> list[tuple[int, int, Any]]:
    """(start, end, FDE) of every FDE in .eh_frame and .debug_frame of one ELF file."""
    from elftools.elf.elffile import ELFFile  # here: pyelftools costs ~30 ms to import (-X importtime); only CFI reading needs it

    stream = open(path, "rb")  # kept open: FDEs decode lazily from it
    elf = ELFFile(stream)
    if not (elf.get_section_by_name(".eh_frame") or elf.get_section_by_name(".debug_frame")):
        return []
    if elf.header.e_type == "ET_REL":  # a module: its CFI holds addresses only once relocated, as its DWARF is
        from kprobe_tui.debuginfo.dwarfopen import open_dwarf  # here: ~4 ms to import (-X importtime); modules only

        dwarf = open_dwarf(Path(path))[2]
    else:
        dwarf = elf.get_dwarf_info(relocate_dwarf_sections=False, follow_links=False)
    entries = []
    for has, read in ((dwarf.has_EH_CFI, dwarf.EH_CFI_entries), (dwarf.has_CFI, dwarf.CFI_entries)):
        if has():
            for entry in read():
                header = getattr(entry, "header", None)
                if header is not None and "initial_location" in header and hasattr(entry, "cie"):
                    start = header["initial_location"]
                    entries.append((start, start + header["address_range"], entry))
    return sorted(entries, key=lambda e: e[0])


def cfa_at(path: str, address: int, what: str) -> Value:
    """The CFA rule at an address (``%sp + 8`` at a function's first byte) from the file's CFI."""
    for start, end, fde in _fde_table(path):
        if start <= address < end:
            rule = None
            for row in fde.get_decoded().table:
                if row["pc"] > address:
                    break
                rule = row.get("cfa")
            if rule is None or rule.expr is not None or rule.reg is None:
                raise NotExpressible(f"{what}: the CFA at 0x{address:x} is an expression, not register+offset")
            return Value(f"%{_reg(rule.reg, what)}", rule.offset)
    raise NotExpressible(f"{what}: no call-frame information covers 0x{address:x}", "probe a variable that is not on the stack")
