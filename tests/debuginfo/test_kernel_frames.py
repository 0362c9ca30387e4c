"""Kernel stack frames named with their ``file:line``, and the functions inlined at them, from Debian's debug
vmlinux (the one the 6.1 guest boots), against binutils' ``addr2line -i -f`` on the same addresses: the frames
are a real table's, the one ``count vfs_read --by stack`` read in that guest
(tests/kernel/test_stack_hist_guest.py's workload)."""

from __future__ import annotations

import re
import subprocess

from kprobe_tui.aggregate.stackrun import KernelFrames
from tests.unit.test_stack_lines import addr2line_inlined

# Outermost first, as StackTable keeps them; the innermost is where the kprobe fired (not a return address).
STACKS = [
    ("entry_SYSCALL_64_after_hwframe+0x6e", "do_syscall_64+0x5d", "ksys_read+0xb7", "vfs_read+0x5"),
    ("entry_SYSCALL_64_after_hwframe+0x6e", "do_syscall_64+0x5d", "__x64_sys_pread64+0x94", "vfs_read+0x5"),
]
C_FUNCTIONS = ("do_syscall_64", "ksys_read", "__x64_sys_pread64", "vfs_read")


def addresses(vmlinux, wanted: set[str]) -> dict[str, int]:
    """The functions' addresses in the vmlinux as nm gives them."""
    out = subprocess.run(["nm", "--defined-only", str(vmlinux)], capture_output=True, text=True, check=True).stdout
    return {name: int(value, 16) for value, _, name in (line.split(" ", 2) for line in out.splitlines()
                                                        if line.count(" ") == 2) if name in wanted}


def addr2line_frames(vmlinux, frame: str, address: int) -> tuple[str, ...]:
    """The frame as addr2line -i -f names its address: with the line where its function calls the outermost
    inlined one, then each inlined function with its line (outermost first); the frame alone without a line."""
    chain = addr2line_inlined(vmlinux, [address])[0]
    if not chain:
        return (frame,)
    return (f"{frame} {chain[0][1]}", *(f"{function} (inlined) {line}" for function, line in chain[1:]))


def expected_stack(vmlinux, stack: tuple[str, ...], start: dict[str, int]) -> tuple[str, ...]:
    """Each frame of a C function as addr2line names it (a return address: its call, the address less one);
    an assembly label, which has no function symbol, as the kernel printed it."""
    expected: list[str] = []
    for at, frame in enumerate(stack):
        function, offset = re.fullmatch(r"(\w+)\+0x([0-9a-f]+)", frame).groups()
        returned = at < len(stack) - 1
        expected += (addr2line_frames(vmlinux, frame, start[function] + int(offset, 16) - returned)
                     if function in start else (frame,))
    return tuple(expected)


def test_kernel_frames_get_the_lines_and_inlined_functions_addr2line_gives_a_return_address_its_calls(kernel_debug):
    frames = KernelFrames(str(kernel_debug.vmlinux))
    start = addresses(kernel_debug.vmlinux, set(C_FUNCTIONS))
    named = [frames.stack(stack) for stack in STACKS]
    assert named == [expected_stack(kernel_debug.vmlinux, stack, start) for stack in STACKS]
    assert named[0][-1] == "vfs_read+0x5 read_write.c:451"  # the probed function's first line
    assert named[1][1:3] == ("do_syscall_64+0x5d common.c:76", "do_syscall_x64 (inlined) common.c:46")
    assert [frame.split(" (inlined)")[0] for frame in named[1][4:-1]] == ["__se_sys_pread64", "__do_sys_pread64",
                                                                        "ksys_pread64"]


def test_frames_without_debug_info_or_of_a_module_stay_as_printed(kernel_debug, tmp_path):
    frames = KernelFrames(str(kernel_debug.vmlinux))
    assert frames.stack(("nfs_file_read+0x10 [nfs]", "0xffffffffc02800c8", "vfs_read+0x5")) == (
        "nfs_file_read+0x10 [nfs]", "0xffffffffc02800c8", "vfs_read+0x5 read_write.c:451")
    no_dwarf = tmp_path / "vmlinux"
    no_dwarf.write_bytes(b"\x7fELF not a kernel")
    assert KernelFrames(str(no_dwarf)).stack(STACKS[0]) == STACKS[0]
