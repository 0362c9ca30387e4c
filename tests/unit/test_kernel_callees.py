"""The callees read from a kernel function's code: a core file laid out as /proc/kcore is (an ELF core whose
PT_LOADs map kernel addresses), since this host has no /proc/kcore; the guests read the real one
(tests/kernel/test_graph_retval_guest.py)."""

from __future__ import annotations

import struct

from kprobe_tui.kernel.callees import KernelCode

BASE = 0xFFFFFFFF81000000


def call(at: int, target: int, opcode: int = 0xE8) -> bytes:
    return bytes([opcode]) + struct.pack("<i", target - (at + 5))


def core(path, address: int, code: bytes) -> None:
    header = b"\x7fELF\x02\x01\x01" + bytes(9) + struct.pack("<HHIQQQIHHHHHH", 4, 62, 1, 0, 64, 0, 0, 64, 56, 2, 0, 0, 0)
    note = struct.pack("<IIQQQQQQ", 4, 0, 0, 0, 0, 0, 0, 0)  # a PT_NOTE first, as kcore has
    load = struct.pack("<IIQQQQQQ", 1, 5, 64 + 2 * 56, address, 0, len(code), len(code), 4096)
    path.write_bytes(header + note + load + code)


def test_direct_calls_and_tail_calls_that_land_on_a_function_start_are_its_callees(tmp_path):
    work, helper, callee, tail, trace = BASE + 0x100, BASE + 0x200, BASE + 0x300, BASE + 0x400, BASE + 0x500
    code = bytearray(0x600)
    code[0x100:0x105] = call(work, BASE + 0x800, 0xE8)  # __fentry__'s call (patched to the trampoline): a helper
    code[0x105:0x10A] = call(work + 5, helper)  # __x86_return_thunk: a helper
    code[0x10A:0x10F] = call(work + 10, callee)
    code[0x10F:0x114] = call(work + 15, callee + 1)  # not a function's start: a stray e8 byte
    code[0x114:0x116] = b"\x48\xe8"  # an e8 inside another instruction, cut at the function's end
    code[0x1F0:0x1F5] = call(work + 0xF0, tail, 0xE9)  # a tail call
    code[0x1F5:0x1FA] = call(work + 0xF5, callee)  # a second call: once
    core(tmp_path / "kcore", BASE, bytes(code))
    (tmp_path / "kallsyms").write_text(
        f"{BASE:x} T _stext\n{work:x} T work\n{helper:x} T __x86_return_thunk\n{callee:x} t callee.isra.0\n"
        f"{tail:x} T tail\n{trace:x} T traced [mod]\n{BASE + 0x800:x} t ftrace_trampoline\n"
        f"{BASE + 0x900:x} T _etext\n0 A fixed_percpu_data\n")
    code_reader = KernelCode(str(tmp_path / "kallsyms"), str(tmp_path / "kcore"))
    assert code_reader.callees("work") == ["callee.isra.0", "tail"]
    assert code_reader.callees("no_such_function") == [] and code_reader.callees("tail") == []
