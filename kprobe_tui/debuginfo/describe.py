"""Variables at probe points as text: perf probe -V's listing, and where each variable lives.

The CLI prints it; the TUI's source view shows it for the line under the cursor.
"""

from __future__ import annotations

import re

from kprobe_tui.debuginfo.scope import PointSpec, ProbePoint, Variable

__all__ = ["format_points"]

X86_64_REGISTERS = ["rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp",
                    "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15"]


def _register(op: str, args: list) -> str:
    """The x86-64 name of the register a DW_OP_reg*/breg* op names."""
    number = args[0] if op in ("DW_OP_regx", "DW_OP_bregx") else int(re.sub(r"\D", "", op))
    return X86_64_REGISTERS[number] if number < len(X86_64_REGISTERS) else f"dwarf register {number}"


def describe_location(variable: Variable, point: ProbePoint) -> str:
    """Where a variable lives at a probe address, in words a learner can act on."""
    if variable.const_value is not None:
        return f"constant {variable.const_value!r} (no storage: the compiler folded it)"
    if variable.location is None:
        return "optimised out at this address (no location covers it)"
    first, args = variable.location[0]
    ops = [op for op, _ in variable.location]
    if first == "DW_OP_entry_value":
        text = "only its value at function entry is known (DW_OP_entry_value): not capturable here"
    elif first == "DW_OP_addr":
        text = f"global memory at {args[0]:#x}"
    elif first == "DW_OP_fbreg":
        text = f"stack slot at frame base {args[0]:+d}"
    elif first.startswith("DW_OP_reg"):
        text = f"register %{_register(first, args)}"
    elif first.startswith("DW_OP_breg"):
        text = f"memory at %{_register(first, args)}{args[-1]:+d}"
    else:
        text = f"{first} (perf cannot fetch this)"
    if "DW_OP_stack_value" in ops and first != "DW_OP_entry_value":
        text = f"a value computed from {text.removeprefix('memory at ')} by {', '.join(ops[1:])} (perf reads only the first op)"
    elif len(ops) > 1 and first != "DW_OP_entry_value":
        text += f" (then {', '.join(ops[1:])})"
    if variable.location_range:
        low, high = variable.location_range
        base = point.address - point.offset
        text += f", valid in <{point.function}+{low - base}-{high - base}>"
    return text


def range_entry(variable: Variable, point: ProbePoint) -> str | None:
    """perf -V --range's entry for a variable: [VAL] (located at the address), [INV] (a local located only
    later) or [EXT] (a global, for --externs, without ranges), then where in the function it has a
    location, as offsets from the function's entry. None where perf leaves it out (no location of its own)."""
    if variable.in_unit:
        return f"[EXT]\t{variable.type_name}\t{variable.name}"
    if variable.valid_in is None:
        return None
    base = point.address - point.offset
    # perf prints the offsets unsigned: a range before the entry (a .cold part) wraps, as here
    spans = ",".join(f"{(low - base) % 2**64}-{(high - base) % 2**64}" for low, high in variable.valid_in)
    where = f"@<{point.function}+[{spans}]>" if spans else ""
    return f"{'[VAL]' if variable.located_here else '[INV]'}\t{variable.type_name}\t{variable.name}\t{where}"


def format_points(spec: PointSpec, points: list[ProbePoint], verbose: bool, ranges: bool = False) -> str:
    """perf -V's listing (``ranges``: -V --range's); ``verbose`` adds what perf hides and where each variable lives."""
    out = [f"Available variables at {spec}\n"]
    for point in points:
        out.append(f"\t@<{point.function}+{point.offset}>\n")
        if ranges:
            entries = (range_entry(v, point) for v in point.variables if v.listed_by_perf)
            listed = sorted({entry for entry in entries if entry is not None})
        else:
            listed = sorted({f"{v.type_name}\t{v.name}" for v in point.variables if v.listed_by_perf})
        if verbose:
            for variable in sorted(point.variables, key=lambda v: (not v.listed_by_perf, v.type_name, v.name)):
                mark = "" if variable.listed_by_perf else "[not capturable] "
                out.append(f"\t\t{mark}{variable.type_name}\t{variable.name}\t{describe_location(variable, point)}\n")
            if not point.variables:
                out.append("\t\t(No matched variables)\n")
            continue
        out.extend(f"\t\t{line}\n" for line in listed)
        if not listed:
            out.append("\t\t(No matched variables)\n")
    return "".join(out)
