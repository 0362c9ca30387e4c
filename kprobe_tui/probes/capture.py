"""What can be captured at a probe point, as a tree the probe builder shows with checkboxes.

Roots are the variables in scope (DWARF: parameters and locals, from the compiler's own view of
the point, prologue skip included) or, for a kernel function without DWARF, the BTF prototype's
parameters. Pointers to structs and structs expand lazily into members (anonymous members
flattened, as ``find_member`` resolves them), so ``sk`` -> ``__sk_common`` -> ``skc_state`` is
found by looking, not by knowing. Each node carries the perf-syntax expression the compiler
takes (``sk->__sk_common.skc_state``, ``rec->name:string``), what it would be read as, where it
lives, and why it cannot be captured when it cannot.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kprobe_tui.debuginfo.corrupt import file_of_die, reports_corruption
from kprobe_tui.debuginfo.scope import asking_about
from kprobe_tui.errors import UserError
from kprobe_tui.kernel import btf as kb
from kprobe_tui.kernel.btf import Btf
from kprobe_tui.probes import locations as loc
from kprobe_tui.probes.dwarffetch import dwarf_points
from kprobe_tui.probes.rawfetch import ARG_REGISTERS
from kprobe_tui.probes.spec import LOCALS_GONE, ProbeSpec

# The type overrides offered per argument (kprobetrace.rst "Types"); "" is the compiler's own choice.
TYPE_CHOICES = (
    "", "u8", "u16", "u32", "u64", "s8", "s16", "s32", "s64", "x8", "x16", "x32", "x64",
    "string", "ustring", "char", "symbol",
)

_DUMMY_ABSOLUTE = "@0x{:x}".format  # only whether a location is expressible is asked, not its text


@dataclass(frozen=True)
class VariableNode:
    """One tickable (or explained) row: a variable, a member reached through it, or ``$retval``."""

    expression: str  # perf syntax, without :TYPE: what goes into the arguments
    name: str  # what the row is called: the variable or member name
    type_name: str  # C spelling
    where: str  # register %di, stack, +8 (member offset), bits 3@2, optimised out...
    expandable: bool = False
    capturable: bool = True
    why_not: str = ""  # when not capturable: the reason, shown beside it
    default_type: str | None = None  # "string" for char * and char[]; else the compiler picks from the C type
    reads_as: str = ""  # the tracefs type the compiler will use (s32, x64, b3@2/32, string)
    handle: Any = field(default=None, compare=False, repr=False)  # ("dwarf", type DIE) or ("btf", Btf, type id)

    @property
    def argument(self) -> str:
        """What ticking adds to the arguments: the expression with its default type."""
        return self.expression + (f":{self.default_type}" if self.default_type else "")


def retval_node(type_name: str = "return value") -> VariableNode:
    return VariableNode("$retval", "$retval", type_name, "register %ax at return")


# -- DWARF ------------------------------------------------------------------------------------


@reports_corruption(lambda spec, vmlinux=None: spec.binary or vmlinux or "the running kernel's vmlinux")
def dwarf_variables(spec: ProbeSpec, vmlinux: str | None = None) -> list[VariableNode]:
    """Parameters and locals at the first address the spec compiles to, innermost name wins."""
    info, points = dwarf_points(spec, vmlinux)
    point = points[0][0]
    chosen: dict[str, Any] = {}
    for variable in point.variables:
        if not variable.is_external:
            chosen[variable.name] = variable
    with info.asking():  # what each one reads as comes from its type's DIEs
        nodes = only_nameable([_dwarf_root(variable, spec) for variable in chosen.values()])
        if spec.is_return:
            nodes.append(retval_node(_return_type_name(info, spec)))
    return nodes


def _return_type_name(info, spec: ProbeSpec) -> str:
    sites = info.function(spec.function)
    return loc.type_name(loc.type_of(sites[0].die)) if sites else "return value"


def _dwarf_root(variable, spec: ProbeSpec) -> VariableNode:
    node = _dwarf_node(variable.name, variable.name, variable.type_die, where=_where(variable))
    why = ""
    if spec.is_return and not variable.is_param:
        why = LOCALS_GONE
    elif spec.is_return and spec.is_uprobe:
        why = "uprobes cannot read arguments at function exit: probe the entry"
    elif variable.location is None and variable.const_value is None:
        why = "optimised out here: probe a line where it is live, or build with -Og"
    elif variable.location is not None:
        try:
            loc.evaluate(variable.location, variable.name, frame_base=lambda: loc.Value("%bp"),
                         cfa=lambda: loc.Value("%sp", 8), absolute=_DUMMY_ABSOLUTE)
        except loc.NotExpressible as exc:
            why = exc.message
    if why:
        return VariableNode(node.expression, node.name, node.type_name, node.where, node.expandable and not spec.is_return,
                            False, why, handle=node.handle)
    return node


def _where(variable) -> str:
    """Where the variable lives at the address, from the first op of its location."""
    if variable.location is None:
        return "constant" if variable.const_value is not None else "optimised out"
    op, args = variable.location[0]
    if op.startswith("DW_OP_reg") and op != "DW_OP_regval_type":
        number = args[0] if op == "DW_OP_regx" else int(op.removeprefix("DW_OP_reg"))
        return f"register %{loc.DWARF_REGISTERS[number]}" if number < len(loc.DWARF_REGISTERS) else "register"
    if op in ("DW_OP_fbreg", "DW_OP_call_frame_cfa", "DW_OP_breg6", "DW_OP_breg7"):
        return "stack"
    if op.startswith("DW_OP_breg"):
        number = int(op.removeprefix("DW_OP_breg")) if op != "DW_OP_bregx" else args[0]
        return f"memory at %{loc.DWARF_REGISTERS[number]}" if number < len(loc.DWARF_REGISTERS) else "memory"
    if op == "DW_OP_addr":
        return "global"
    return "computed"


def _dwarf_node(expression: str, name: str, type_die, where: str, bits: tuple[int, int] | None = None) -> VariableNode:
    """A node for a C object of ``type_die``: what it reads as, whether it expands or takes a string."""
    real = loc.strip(type_die)
    type_name = loc.type_name(type_die)
    handle = ("dwarf", type_die)
    if bits is not None:
        _, bit_type = loc.bitfield_fetch(loc.Value("%r"), bits[0], bits[1], type_die, _DUMMY_ABSOLUTE)
        return VariableNode(expression, name, f"{type_name} : {bits[1]}", where, reads_as=bit_type, handle=handle)
    if real is not None and real.tag in ("DW_TAG_structure_type", "DW_TAG_union_type", "DW_TAG_class_type"):
        return VariableNode(expression, name, type_name, where, True, False, "a struct: expand it and tick members",
                            handle=handle)
    if real is not None and real.tag == "DW_TAG_pointer_type":
        target = loc.strip(loc.type_of(real))
        if loc.is_char(target):
            return VariableNode(expression, name, type_name, where, default_type="string", reads_as="string", handle=handle)
        expandable = target is not None and target.tag in ("DW_TAG_structure_type", "DW_TAG_union_type", "DW_TAG_class_type")
        return VariableNode(expression, name, type_name, where, expandable, reads_as="x64", handle=handle)
    if real is not None and real.tag == "DW_TAG_array_type" and loc.is_char(loc.type_of(real)):
        return VariableNode(expression, name, type_name, where, default_type="string", reads_as="string", handle=handle)
    try:
        reads_as = loc.fetch_type(type_die, expression)
    except loc.NotExpressible as exc:
        return VariableNode(expression, name, type_name, where, False, False, exc.message, handle=handle)
    return VariableNode(expression, name, type_name, where, reads_as=reads_as, handle=handle)


@reports_corruption(lambda node: file_of_die(node.handle[1]))
def _dwarf_children(node: VariableNode) -> list[VariableNode]:
    with asking_about(node.handle[1]):
        return _dwarf_members(node)


def _dwarf_members(node: VariableNode) -> list[VariableNode]:
    real = loc.strip(node.handle[1])
    if real.tag == "DW_TAG_pointer_type":
        real, op = loc.strip(loc.type_of(real)), "->"
    else:
        op = "."
    kids = []
    for name in loc.member_names(real):
        member = loc.find_member(real, name, f"{node.expression}{op}{name}")
        expression = f"{node.expression}{op}{name}"
        type_die = loc.type_of(member.die)
        if member.bits is not None:
            where = f"bits {member.bit_size}@{member.bit_offset}"
            kids.append(_dwarf_node(expression, name, type_die, where, member.bits))
        else:
            kids.append(_dwarf_node(expression, name, type_die, f"+{member.byte_offset}"))
    return kids


# -- BTF --------------------------------------------------------------------------------------


def btf_variables(function: str, btf_path: str | Path | None = None, *, is_return: bool = False) -> list[VariableNode]:
    """A kernel function's parameters from its BTF prototype (no locals without DWARF)."""
    btf = Btf.shared(btf_path)
    if not btf.has_function(function):
        raise UserError(f"{function!r}: not in the kernel's BTF (inlined, or in a module without BTF)",
                        "capture registers in Args ($arg1, %di), or give -k VMLINUX")
    nodes = []
    for index, param in enumerate(p for p in btf.params(function) if p.name != "..."):
        if is_return:
            where = f"$arg{index + 1}, saved at entry"
        else:
            where = f"register %{ARG_REGISTERS[index]}" if index < len(ARG_REGISTERS) else "stack"
        node = _btf_node(btf, param.name, param.name, param.type_id, where)
        if index >= len(ARG_REGISTERS) and not is_return:
            node = _unavailable(node, "passed on the stack: read it with $stackN in Args")
        nodes.append(node)
    nodes = only_nameable(nodes)
    if is_return:
        nodes.append(retval_node(btf.type_name(btf.return_type(function))))
    return nodes


def _unavailable(node: VariableNode, why: str) -> VariableNode:
    return VariableNode(node.expression, node.name, node.type_name, node.where, node.expandable, False, why,
                        handle=node.handle)


def _btf_node(btf, expression: str, name: str, type_id: int, where: str, bits: int = 0, bit_offset: int = 0) -> VariableNode:
    type_name = btf.type_name(type_id)
    handle = ("btf", btf, type_id)
    real = btf.resolve(type_id)
    kind = btf.kind(real)
    if bits:
        reads_as = f"b{bits}@{bit_offset % 8}/{btf.size_of(type_id) * 8}"
        return VariableNode(expression, name, f"{type_name} : {bits}", where, reads_as=reads_as, handle=handle)
    if kind in (kb.STRUCT, kb.UNION):
        return VariableNode(expression, name, type_name, where, True, False, "a struct: expand it and tick members",
                            handle=handle)
    if kind == kb.PTR:
        target = btf.resolve(btf.pointee(real))
        target_kind = btf.kind(target) if target else kb.VOID
        if target_kind == kb.INT and btf.size_of(target) == 1:
            return VariableNode(expression, name, type_name, where, default_type="string", reads_as="string", handle=handle)
        return VariableNode(expression, name, type_name, where, target_kind in (kb.STRUCT, kb.UNION), reads_as="x64",
                            handle=handle)
    if kind in (kb.INT, kb.ENUM, kb.ENUM64):
        size = btf.size_of(real)
        if size in (1, 2, 4, 8):
            return VariableNode(expression, name, type_name, where,
                                reads_as=f"{'s' if btf.is_signed(real) else 'u'}{size * 8}", handle=handle)
    why = "arrays are not compiled from BTF: give -k VMLINUX" if kind == kb.ARRAY else "not a value of 1, 2, 4 or 8 bytes"
    return VariableNode(expression, name, type_name, where, False, False, why, handle=handle)


def _btf_children(node: VariableNode) -> list[VariableNode]:
    _, btf, type_id = node.handle
    if btf.is_pointer(type_id):
        type_id, op = btf.pointee(type_id), "->"
    else:
        op = "."
    return [_btf_member(btf, node.expression, op, member, base) for member, base in _flat_members(btf, type_id, 0)]


def _flat_members(btf, type_id: int, base: int) -> list:
    """(member, bit offset of its struct) with anonymous struct/union members flattened."""
    found = []
    for member in btf.members(type_id):
        if not member.name and btf.kind(btf.resolve(member.type_id)) in (kb.STRUCT, kb.UNION):
            found += _flat_members(btf, member.type_id, base + member.bit_offset)
        elif member.name:
            found.append((member, base))
    return found


def _btf_member(btf, parent: str, op: str, member, base: int) -> VariableNode:
    bit = base + member.bit_offset
    expression = f"{parent}{op}{member.name}"
    if member.bitfield_size:
        where = f"bits {member.bitfield_size}@{bit}"
        return _btf_node(btf, expression, member.name, member.type_id, where, member.bitfield_size, bit)
    return _btf_node(btf, expression, member.name, member.type_id, f"+{bit // 8}")


# -- both -------------------------------------------------------------------------------------


def children(node: VariableNode) -> list[VariableNode]:
    """The members of a struct, or of the struct a pointer points to; [] for anything else."""
    if not node.expandable:
        return []
    return only_nameable(_dwarf_children(node) if node.handle[0] == "dwarf" else _btf_children(node))


def only_nameable(nodes: list[VariableNode]) -> list[VariableNode]:
    """Nodes whose name a probe cannot spell (debug info may hold any bytes: an escape sequence, a space)
    shown but not tickable: ticking puts the expression into the Args box and then into tracefs."""
    return [node if node.name.isidentifier() and node.name.isprintable() else
            replace(_unavailable(node, "its name is not a C identifier: no probe can name it"), expandable=False)
            for node in nodes]




def next_type(current: str | None, step: int = 1) -> str | None:
    """The override after ``current`` in TYPE_CHOICES (None: the compiler's choice), wrapping around."""
    index = TYPE_CHOICES.index(current) if current in TYPE_CHOICES else 0
    return TYPE_CHOICES[(index + step) % len(TYPE_CHOICES)] or None
