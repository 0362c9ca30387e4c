"""Kernel stack frames named with their ``file:line`` from Debian's debug vmlinux (the one the 6.1 guest
boots), against binutils' addr2line on the same addresses: the frames are a real table's, the one
``count vfs_read --by stack`` read in that guest (tests/kernel/test_stack_hist_guest.py's workload)."""

from __future__ import annotations

import os
import re
import subprocess

from kprobe_tui.aggregate.stackrun import KernelFrames

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


def addr2line(vmlinux, address: int) -> str:
    out = subprocess.run(["addr2line", "-e", str(vmlinux), f"{address:x}"], capture_output=True, text=True,
                         check=True).stdout.strip()
    file, _, line = out.rpartition(":")
    return f"{os.path.basename(file)}:{line}"


def test_kernel_frames_get_the_line_addr2line_gives_a_return_address_its_calls(kernel_debug):
    frames = KernelFrames(str(kernel_debug.vmlinux))
    start = addresses(kernel_debug.vmlinux, {*C_FUNCTIONS, "entry_SYSCALL_64_after_hwframe"})
    for stack in STACKS:
        named = frames.stack(stack)
        for at, (frame, shown) in enumerate(zip(stack, named)):
            function, offset = re.fullmatch(r"(\w+)\+0x([0-9a-f]+)", frame).groups()
            returned = at < len(stack) - 1
            expected = addr2line(kernel_debug.vmlinux, start[function] + int(offset, 16) - returned)
            if function in C_FUNCTIONS:
                assert shown == f"{frame} {expected}", (shown, expected)
            else:  # an assembly label, no function symbol: kept as the kernel printed it
                assert shown == frame
    assert frames.stack(STACKS[0])[-1] == "vfs_read+0x5 read_write.c:451"  # the probed function's first line


def test_frames_without_debug_info_or_of_a_module_stay_as_printed(kernel_debug, tmp_path):
    frames = KernelFrames(str(kernel_debug.vmlinux))
    assert frames.stack(("nfs_file_read+0x10 [nfs]", "0xffffffffc02800c8", "vfs_read+0x5")) == (
        "nfs_file_read+0x10 [nfs]", "0xffffffffc02800c8", "vfs_read+0x5 read_write.c:451")
    no_dwarf = tmp_path / "vmlinux"
    no_dwarf.write_bytes(b"\x7fELF not a kernel")
    assert KernelFrames(str(no_dwarf)).stack(STACKS[0]) == STACKS[0]
