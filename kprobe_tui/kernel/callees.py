"""The functions a kernel function calls directly, read from its machine code in ``/proc/kcore``.

A graph's return probes must be on before the calls they are for: a command's few calls are over before
its graph's first lines are read (the 6.12 guest: five opens in 25 ms, read 100 ms later), so the callees
cannot wait to be seen. Without the kernel's debug info, the code says them: on x86-64 a direct call is
``e8`` and a tail call ``e9`` with a 32-bit displacement; a displacement that lands exactly on the start of
a function in ``/proc/kallsyms`` is taken as a call of it (a stray ``e8`` byte inside another instruction
almost never does). Calls through a pointer (``i_op->lookup``) are not found here; the graph shows them.
"""

from __future__ import annotations

import os
import platform
import re
import struct
from collections.abc import Iterator

KCORE = "/proc/kcore"
KALLSYMS = "/proc/kallsyms"
MAX_FUNCTION_BYTES = 1 << 16  # a larger "function" is a symbol without a next one near it: not read
_CALLS = re.compile(rb"[\xe8\xe9]")
# Called by every function and not a callee worth a return value: the compiler's and the build's helpers (and the
# trampoline a probed function's first instruction calls).
_HELPERS = ("__fentry__", "ftrace_trampoline", "__x86_", "__stack_chk_fail", "__SCT__", "__static_call", "__cfi_", "__pfx_",
            "__ubsan_", "__asan_", "__kasan_", "__kcsan_", "__sanitizer_")


class KernelCode:
    """The running kernel's functions (``/proc/kallsyms``) and their bytes (``/proc/kcore``), for root."""

    def __init__(self, kallsyms: str = KALLSYMS, kcore: str = KCORE) -> None:
        self.kcore = kcore
        starts: dict[int, str] = {}
        with open(kallsyms, encoding="utf-8", errors="replace") as table:
            for line in table:
                address, kind, name = line.split(maxsplit=3)[:3]
                if kind in "Tt" and int(address, 16):
                    starts.setdefault(int(address, 16), name)
        self.starts = starts
        ordered = sorted(starts)
        self.bounds = {starts[a]: (a, b - a) for a, b in zip(ordered, ordered[1:], strict=False)}

    def callees(self, function: str) -> list[str]:
        """The functions ``function``'s code calls or jumps to directly, in the order of the code."""
        bounds = self.bounds.get(function)
        if bounds is None or not 0 < bounds[1] <= MAX_FUNCTION_BYTES:
            return []
        address, size = bounds
        code = self._read(address, size)
        found = []
        for call in _CALLS.finditer(code, 0, max(len(code) - 4, 0)):
            at = call.start()
            target = address + at + 5 + int.from_bytes(code[at + 1:at + 5], "little", signed=True)
            name = self.starts.get(target)
            if name is not None and name != function and not name.startswith(_HELPERS) and name not in found:
                found.append(name)
        return found

    def _read(self, address: int, size: int) -> bytes:
        """``size`` bytes at kernel address ``address``, through the ELF program headers of /proc/kcore."""
        fd = os.open(self.kcore, os.O_RDONLY | os.O_CLOEXEC)
        try:
            for offset, start, length in _loads(fd):
                if start <= address and address + size <= start + length:
                    return os.pread(fd, size, offset + address - start)
        finally:
            os.close(fd)
        return b""


def _loads(fd: int) -> Iterator[tuple[int, int, int]]:
    """``(file offset, address, size)`` of each PT_LOAD of a 64-bit little-endian ELF core."""
    header = os.pread(fd, 64, 0)
    if header[:6] != b"\x7fELF\x02\x01":
        return
    phoff, = struct.unpack_from("<Q", header, 32)
    entry_size, count = struct.unpack_from("<HH", header, 54)
    table = os.pread(fd, entry_size * count, phoff)
    for index in range(count):
        kind, _flags, offset, address, _physical, size = struct.unpack_from("<IIQQQQ", table, index * entry_size)
        if kind == 1:
            yield offset, address, size


def kernel_callees(function: str, depth: int, limit: int) -> list[str]:
    """FUNC's callees down to ``depth`` levels below it (0: none), shallowest first, at most ``limit``; [] where
    the code cannot be read (not x86-64, not root, a locked-down kernel)."""
    if platform.machine() != "x86_64" or depth <= 0:
        return []
    try:
        code = KernelCode()
        names: list[str] = []
        level = [function]
        for _ in range(depth):
            level = [callee for caller in level for callee in code.callees(caller)
                     if callee not in names and callee != function]
            level = list(dict.fromkeys(level))
            names += level[:limit - len(names)]
            if len(names) >= limit or not level:
                break
        return names
    except (OSError, ValueError, struct.error):
        return []
