"""BPF without a compiler: instructions assembled here, loaded with ``bpf(2)``, run on our probes' events.

Why: a hist trigger costs the traced system about 2.3x what bpftrace's program costs per hit
(benchmarks/bench_hit_cost.py, 6.1 guest); a small BPF program on the same kprobe costs what
bpftrace's does, and needs no LLVM (bpftrace takes seconds to start). The programs are attached to
the tracefs events our run made (``perf_event_open`` on the event's id, then
``PERF_EVENT_IOC_SET_BPF``), so the probes are made, named and cleaned up as every run's are; the
programs, maps and perf events are file descriptors and go with the process, SIGKILL included.

x86-64 only (the syscall numbers and ``pt_regs``). Every failure is a ``BpfError`` with the kernel's
own words (the verifier's log included) so that the caller can fall back and say why.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
from dataclasses import dataclass

__all__ = ["ANY", "Assembler", "BpfError", "GET_CURRENT_COMM", "GET_CURRENT_PID_TGID", "HASH", "Insn", "KTIME_GET_NS",
           "MAP_DELETE_ELEM", "MAP_LOOKUP_ELEM", "MAP_UPDATE_ELEM", "Map", "NOEXIST", "PERCPU_ARRAY", "Program", "alu",
           "atomic_add", "attach", "call", "exit_", "load", "load_map", "possible_cpus", "store", "store_imm",
           "supported"]

_SYS_BPF = 321
_SYS_PERF_EVENT_OPEN = 298
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long

# bpf(2) commands and kinds (include/uapi/linux/bpf.h)
_MAP_CREATE, _MAP_LOOKUP, _MAP_UPDATE, _MAP_DELETE, _MAP_NEXT_KEY, _PROG_LOAD = 0, 1, 2, 3, 4, 5
HASH, PERCPU_HASH, PERCPU_ARRAY = 1, 5, 6
_PROG_KPROBE = 2  # kprobe and uprobe events alike: the program gets the probed thread's pt_regs
# Helper functions by number
MAP_LOOKUP_ELEM, MAP_UPDATE_ELEM, KTIME_GET_NS, GET_CURRENT_PID_TGID, GET_CURRENT_COMM = 1, 2, 5, 14, 16
MAP_DELETE_ELEM = 3
ANY, NOEXIST = 0, 1  # map update flags
# perf_event_open
_PERF_TYPE_TRACEPOINT = 2
_PERF_FLAG_FD_CLOEXEC = 8
_IOC_ENABLE = 0x2400
_IOC_SET_BPF = 0x40042408
LOG_SIZE = 1 << 20
CAP_SYS_ADMIN, CAP_PERFMON, CAP_BPF = 21, 38, 39  # the verifier's log, read only when it refuses


class BpfError(Exception):
    """The kernel refused (``errno`` kept): the caller falls back to another engine and says why."""

    def __init__(self, what: str, code: int, log: str = "") -> None:
        self.code = code
        self.log = log
        super().__init__(f"{what}: {os.strerror(code)}" + (f" ({_last_line(log)})" if log else ""))


def _last_line(log: str) -> str:
    """The verifier's reason: its log's last line before the statistics it ends with."""
    lines = [line for line in log.splitlines() if line.strip() and not line.startswith(("processed ", "verification time"))]
    return lines[-1] if lines else ""


def supported() -> str | None:
    """Why BPF programs cannot run here, or None when they may (the kernel still has the last word)."""
    if platform.machine() != "x86_64":
        return f"the BPF engine knows x86-64's registers only, not {platform.machine()}'s"
    held = _effective_capabilities()
    if not (held >> CAP_SYS_ADMIN & 1 or (held >> CAP_BPF & 1 and held >> CAP_PERFMON & 1)):
        return "loading BPF programs needs CAP_BPF and CAP_PERFMON (or root)"
    return None


def _effective_capabilities() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    return 0


def _bpf(command: int, attr: bytes, what: str) -> int:
    buffer = ctypes.create_string_buffer(attr, len(attr))
    result = _libc.syscall(_SYS_BPF, command, buffer, len(attr))
    if result < 0:
        raise BpfError(what, ctypes.get_errno())
    return result


# -- instructions --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Insn:
    """One ``struct bpf_insn``: opcode, registers, offset, immediate."""

    code: int
    dst: int = 0
    src: int = 0
    off: int = 0
    imm: int = 0

    def encode(self) -> bytes:
        return struct.pack("<BBhi", self.code, (self.src << 4) | self.dst, self.off, self.imm)


# Opcode parts
_ALU64, _JMP, _LDX, _STX, _ST = 0x07, 0x05, 0x01, 0x03, 0x02
_K, _X = 0x00, 0x08
_MEM, _ATOMIC = 0x60, 0xC0
SIZES = {1: 0x10, 2: 0x08, 4: 0x00, 8: 0x18}
ALU = {"+": 0x00, "-": 0x10, "*": 0x20, "/": 0x30, "|": 0x40, "&": 0x50, "<<": 0x60, ">>": 0x70, "=": 0xB0,
       "s>>": 0xC0}
JUMP = {"==": 0x10, ">": 0x20, ">=": 0x30, "!=": 0x50, "s>": 0x60}


def alu(op: str, dst: int, value: int, *, register: bool = False) -> Insn:
    """``dst op= value`` on 64 bits (``register``: value is a register)."""
    return Insn(_ALU64 | ALU[op] | (_X if register else _K), dst, value if register else 0, 0, 0 if register else value)


def jump(op: str, dst: int, value: int, skip: int) -> Insn:
    """``if dst op value: skip `skip` instructions`` (an immediate value)."""
    return Insn(_JMP | JUMP[op] | _K, dst, 0, skip, value)


def goto(skip: int) -> Insn:
    return Insn(_JMP, off=skip)


def load(dst: int, src: int, off: int, size: int = 8) -> Insn:
    """``dst = *(size *)(src + off)``"""
    return Insn(_LDX | _MEM | SIZES[size], dst, src, off)


def store(dst: int, off: int, src: int, size: int = 8) -> Insn:
    """``*(size *)(dst + off) = src`` (a register)"""
    return Insn(_STX | _MEM | SIZES[size], dst, src, off)


def store_imm(dst: int, off: int, value: int, size: int = 8) -> Insn:
    return Insn(_ST | _MEM | SIZES[size], dst, 0, off, value)


def atomic_add(dst: int, off: int, src: int) -> Insn:
    """``*(u64 *)(dst + off) += src``, atomically: hits of several CPUs land in one map value."""
    return Insn(_STX | _ATOMIC | SIZES[8], dst, src, off, 0)


def call(helper: int) -> Insn:
    return Insn(_JMP | 0x80, imm=helper)


def exit_() -> Insn:
    return Insn(_JMP | 0x90)


def load_map(dst: int, fd: int) -> list[Insn]:
    """``dst = the map`` (the two-slot ``ld_imm64`` with a map's file descriptor)."""
    return [Insn(0x18, dst, 1, 0, fd), Insn(0)]


class Assembler:
    """A program as it is written: instructions, and jumps to named labels resolved at the end."""

    def __init__(self) -> None:
        self._code: list[Insn | tuple[str, Insn]] = []  # (label, jump) until resolved
        self._labels: dict[str, int] = {}

    def __call__(self, *instructions: Insn | list[Insn]) -> None:
        for insn in instructions:
            self._code.extend(insn if isinstance(insn, list) else [insn])

    def label(self, name: str) -> None:
        self._labels[name] = len(self._code)

    def jump(self, op: str, register: int, value: int, label: str) -> None:
        self._code.append((label, jump(op, register, value, 0)))

    def goto(self, label: str) -> None:
        self._code.append((label, goto(0)))

    def assemble(self) -> list[Insn]:
        return [Insn(item[1].code, item[1].dst, item[1].src, self._labels[item[0]] - at - 1, item[1].imm)
                if isinstance(item, tuple) else item for at, item in enumerate(self._code)]


# -- maps and programs ---------------------------------------------------------------------------


def possible_cpus() -> int:
    """The kernel's possible CPUs: a per-CPU map's value holds one slot for each."""
    with open("/sys/devices/system/cpu/possible") as ranges:
        text = ranges.read().strip()
    return max(int(part.split("-")[-1]) for part in text.split(",")) + 1


class Map:
    """A BPF map: a file descriptor, closed with the map."""

    def __init__(self, kind: int, key_size: int, value_size: int, max_entries: int, name: str) -> None:
        self.kind, self.key_size, self.value_size = kind, key_size, value_size
        self.slots = possible_cpus() if kind in (PERCPU_HASH, PERCPU_ARRAY) else 1
        self.fd = _bpf(_MAP_CREATE, struct.pack("<IIIII", kind, key_size, value_size, max_entries, 0).ljust(72, b"\0"),
                       f"creating the BPF map {name}")

    def _elem(self, command: int, key: bytes, value, flags: int = 0) -> int:
        key_buffer = ctypes.create_string_buffer(key, self.key_size)
        attr = struct.pack("<IIQQQ", self.fd, 0, ctypes.addressof(key_buffer),
                           ctypes.addressof(value) if value is not None else 0, flags)
        buffer = ctypes.create_string_buffer(attr, len(attr))
        return _libc.syscall(_SYS_BPF, command, buffer, len(attr))

    def lookup(self, key: bytes) -> list[int] | None:
        """The value's u64 words (summed over CPUs for a per-CPU map), or None when the key is absent."""
        value = ctypes.create_string_buffer(self.value_size * self.slots)
        if self._elem(_MAP_LOOKUP, key, value) < 0:
            if ctypes.get_errno() == errno.ENOENT:
                return None
            raise BpfError("reading a BPF map", ctypes.get_errno())
        words = self.value_size // 8
        raw = struct.unpack(f"<{words * self.slots}Q", value.raw)
        return [sum(raw[slot * words + word] for slot in range(self.slots)) for word in range(words)]

    def keys(self) -> list[bytes]:
        """Every key, in the map's order (each read once: a key deleted meanwhile ends the walk early)."""
        found: list[bytes] = []
        previous: bytes | None = None
        while True:
            following = ctypes.create_string_buffer(self.key_size)
            key_buffer = ctypes.create_string_buffer(previous or b"", self.key_size)
            attr = struct.pack("<IIQQQ", self.fd, 0, ctypes.addressof(key_buffer) if previous is not None else 0,
                               ctypes.addressof(following), 0)
            buffer = ctypes.create_string_buffer(attr, len(attr))
            if _libc.syscall(_SYS_BPF, _MAP_NEXT_KEY, buffer, len(attr)) < 0:
                if ctypes.get_errno() == errno.ENOENT:
                    return found
                raise BpfError("walking a BPF map", ctypes.get_errno())
            previous = following.raw
            found.append(previous)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class Program:
    """A loaded kprobe-type program (its file descriptor)."""

    def __init__(self, instructions: list[Insn], name: str) -> None:
        code = b"".join(insn.encode() for insn in instructions)
        code_buffer = ctypes.create_string_buffer(code, len(code))
        license_buffer = ctypes.create_string_buffer(b"GPL")
        log = ctypes.create_string_buffer(LOG_SIZE)
        attr = struct.pack("<IIQQIIQII16s", _PROG_KPROBE, len(instructions), ctypes.addressof(code_buffer),
                           ctypes.addressof(license_buffer), 1, LOG_SIZE, ctypes.addressof(log), 0, 0,
                           name.encode()[:15]).ljust(128, b"\0")
        buffer = ctypes.create_string_buffer(attr, len(attr))
        fd = _libc.syscall(_SYS_BPF, _PROG_LOAD, buffer, len(attr))
        if fd < 0:
            raise BpfError(f"loading the BPF program {name}", ctypes.get_errno(),
                           log.value.decode(errors="replace"))
        self.fd = fd

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def attach(program: Program, event_id: int) -> int:
    """Run ``program`` on every hit of the tracefs event ``event_id``; the perf event's descriptor (closing
    it detaches). One perf event is enough: the kernel runs an event's programs on every CPU's hits."""
    attr = struct.pack("<IIQQQQQII", _PERF_TYPE_TRACEPOINT, 112, event_id, 1, 0, 0, 0, 1, 0).ljust(112, b"\0")
    buffer = ctypes.create_string_buffer(attr, len(attr))
    fd = _libc.syscall(_SYS_PERF_EVENT_OPEN, buffer, -1, 0, -1, _PERF_FLAG_FD_CLOEXEC)
    if fd < 0:
        raise BpfError(f"opening the perf event of tracefs event {event_id}", ctypes.get_errno())
    try:
        for request, argument in ((_IOC_SET_BPF, program.fd), (_IOC_ENABLE, 0)):
            if _libc.ioctl(fd, request, argument) < 0:
                raise BpfError("attaching the BPF program to its event", ctypes.get_errno())
    except BaseException:
        os.close(fd)
        raise
    return fd
