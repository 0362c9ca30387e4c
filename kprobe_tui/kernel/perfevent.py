"""Trace events read the way ``perf record -e GROUP:EVENT -a`` reads them: perf_event_open(2).

A user who cannot make a trace instance may still be let open an event's tracepoint for sampling:
the kernel allows it with ``kernel.perf_event_paranoid = -1`` (raw tracepoint data for everyone) or
with CAP_PERFMON, and needs only the event's ``id`` file to be readable. Each event is opened once
per online CPU (pid -1: every task) with samples of TID, TIME, CPU and RAW (the record the
``format`` file describes, as ``trace_pipe_raw`` holds it); each CPU's events share one ring
buffer (PERF_EVENT_IOC_SET_OUTPUT), so a sample's event is known by its record's ``common_type``.
Nothing is written to tracefs: the filter goes to the perf event (PERF_EVENT_IOC_SET_FILTER, as
``perf record --filter`` does), and closing the descriptors is all the clean-up there is (the
kernel drops the events with their last descriptor, also when the process is killed).

The kernel counts the samples a full ring could not take and writes the count (PERF_RECORD_LOST)
before the next record that fits: the loss at the end of a flood is known at the ring's next record
(the next sample, or an exec's name), not at once; it is never silent.

The ring is read as perf does: ``data_head`` is read, the records up to it copied out, then
``data_tail`` written. On x86-64 loads are not reordered with older loads nor stores with older
loads, so that order needs no barrier (tools/include/asm/barrier.h makes smp_rmb a compiler
barrier there); Python cannot issue one, which is why only x86-64 is supported.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import platform
import select
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from kprobe_tui.errors import UserError

SYSCALL_PERF_EVENT_OPEN = {"x86_64": 298}
PERF_TYPE_SOFTWARE, PERF_TYPE_TRACEPOINT, PERF_COUNT_SW_DUMMY = 1, 2, 9
PERF_SAMPLE_TID, PERF_SAMPLE_TIME, PERF_SAMPLE_CPU, PERF_SAMPLE_RAW = 1 << 1, 1 << 2, 1 << 7, 1 << 10
SAMPLE_TYPE = PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU | PERF_SAMPLE_RAW
PERF_FLAG_FD_CLOEXEC = 1 << 3
# attr flag bits (include/uapi/linux/perf_event.h)
FLAG_DISABLED, FLAG_COMM, FLAG_WATERMARK, FLAG_SAMPLE_ID_ALL, FLAG_COMM_EXEC = 1 << 0, 1 << 9, 1 << 14, 1 << 18, 1 << 24
# ioctls: _IO('$', n), and _IOW('$', 6, char *) for the filter
IOC_ENABLE, IOC_DISABLE, IOC_SET_OUTPUT, IOC_SET_FILTER = 0x2400, 0x2401, 0x2405, 0x40082406
RECORD_LOST, RECORD_COMM, RECORD_SAMPLE, RECORD_LOST_SAMPLES = 2, 3, 9, 13
HEADER = struct.Struct("<IHH")  # type, misc, size
SAMPLE = struct.Struct("<IIQIII")  # pid, tid, time, cpu, reserved, raw size: then the raw record
LOST = struct.Struct("<QQ")  # id, lost
COMM_IDS = struct.Struct("<II")  # pid, tid: then the NUL-terminated name
COMM_ID = struct.Struct("<IIQII")  # a side-band record's sample_id (sample_id_all) of SAMPLE_TYPE: pid, tid, time, cpu
# The mmap'd control page: data_head and data_tail (struct perf_event_mmap_page)
DATA_HEAD, DATA_TAIL = 1024, 1032
U64 = struct.Struct("<Q")
# 128 pages (512 KiB) a CPU, perf record's own default: what kernel.perf_event_mlock_kb (516 KiB a CPU
# by default) lets any user lock. With 64, 400k hits of two programs lost 1.3-1.7 %; with 128, 0-0.25 %
# (benchmarks/bench_student_reader.py); KPROBE_TUI_PERF_PAGES changes it (a power of two).
DEFAULT_PAGES = 128
MAX_PAGES = 1 << 14
PARANOID = "/proc/sys/kernel/perf_event_paranoid"


class PerfAttr(ctypes.Structure):
    """struct perf_event_attr up to sig_data (PERF_ATTR_SIZE_VER7, 128 bytes); the flags as one word."""

    _fields_ = [("type", ctypes.c_uint32), ("size", ctypes.c_uint32), ("config", ctypes.c_uint64),
                ("sample_period", ctypes.c_uint64), ("sample_type", ctypes.c_uint64), ("read_format", ctypes.c_uint64),
                ("flags", ctypes.c_uint64), ("wakeup_watermark", ctypes.c_uint32), ("bp_type", ctypes.c_uint32),
                ("config1", ctypes.c_uint64), ("config2", ctypes.c_uint64), ("branch_sample_type", ctypes.c_uint64),
                ("sample_regs_user", ctypes.c_uint64), ("sample_stack_user", ctypes.c_uint32), ("clockid", ctypes.c_int32),
                ("sample_regs_intr", ctypes.c_uint64), ("aux_watermark", ctypes.c_uint32), ("sample_max_stack", ctypes.c_uint16),
                ("reserved_2", ctypes.c_uint16), ("aux_sample_size", ctypes.c_uint32), ("reserved_3", ctypes.c_uint32),
                ("sig_data", ctypes.c_uint64)]


class Sample(NamedTuple):
    """One PERF_RECORD_SAMPLE: ``raw`` is the trace record (common_type first). A tuple: a flood makes many."""

    pid: int  # the process (tgid)
    tid: int
    time_ns: int
    cpu: int
    raw: bytes


@dataclass
class Batch:
    """What one read of the rings gave: samples per CPU (each in time order), samples lost, names learnt."""

    samples: list[list[Sample]]
    lost: int
    comms: dict[int, str]  # tid -> name, from PERF_RECORD_COMM (an exec or a rename since we started)
    # tid -> the time of its name's record: a rename and an exec on two CPUs come in ring order, not time
    # order (perf's "perf-exec" then the program's name: the rename, read second, named the program's events)
    comm_times: dict[int, int] = field(default_factory=dict)

    def learn(self, tid: int, time_ns: int, name: bytes) -> None:
        """A name record: kept when it is the tid's latest."""
        if time_ns >= self.comm_times.get(tid, -1):
            self.comm_times[tid] = time_ns
            self.comms[tid] = name.split(b"\0", 1)[0].decode("utf-8", "backslashreplace")


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.ioctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p]


def ring_pages() -> int:
    """Data pages of each CPU's ring: KPROBE_TUI_PERF_PAGES or DEFAULT_PAGES (a power of two, as the kernel requires)."""
    text = os.environ.get("KPROBE_TUI_PERF_PAGES", "")
    if not text:
        return DEFAULT_PAGES
    pages = int(text) if text.isdigit() and len(text) < 7 else 0
    if not 1 <= pages <= MAX_PAGES or pages & (pages - 1):
        raise UserError(f"KPROBE_TUI_PERF_PAGES={text!r}: must be a power of two from 1 to {MAX_PAGES}",
                        f"unset it for the default of {DEFAULT_PAGES} pages a CPU")
    return pages


def online_cpus(path: str = "/sys/devices/system/cpu/online") -> list[int]:
    """The online CPUs (``0-3,6``), where a system-wide event must be opened one by one."""
    try:
        text = Path(path).read_text().strip()
    except OSError:
        return list(range(os.cpu_count() or 1))
    cpus: list[int] = []
    for part in filter(None, text.split(",")):
        first, _, last = part.partition("-")
        if not first.isdigit() or not (last or first).isdigit() or len(part) > 20:
            return list(range(os.cpu_count() or 1))
        cpus.extend(range(int(first), int(last or first) + 1))
    return cpus


def paranoid() -> int | None:
    """kernel.perf_event_paranoid, or None when it cannot be read."""
    try:
        text = Path(PARANOID).read_text().strip()
    except OSError:
        return None
    return int(text) if text.lstrip("-").isdigit() and len(text) < 6 else None


def read_event_id(event_dir: Path) -> int:
    """The tracepoint id in ``event_dir/id`` (UserError naming the file when it cannot be read)."""
    path = event_dir / "id"
    try:
        text = path.read_text(errors="replace").strip()
    except FileNotFoundError:
        raise UserError(f"{path} does not exist: the event {event_dir.parent.name}/{event_dir.name} is gone",
                        "list the events again (kprobe-tui list)") from None
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror}",
                        "ask the administrator to make the events' directory readable to you "
                        f"(e.g. chgrp -R GROUP {event_dir.parent} && chmod -R g+rX {event_dir.parent})") from None
    if not text.isdigit() or len(text) > 10:
        raise UserError(f"{path} holds {text[:40]!r}, not a tracepoint id")
    return int(text)


# What a student's group must read besides the events: Debian 6.1's tracefs makes its files 0640 or 0440 and
# its directories 0750, root:root. Without the definition files the probes cannot be listed, without README
# (what the kernel offers) nothing can be counted; without events/header_page, every ftrace format,
# printk_formats and saved_cmdlines (its tracing data) the student's perf record writes a perf.data that perf
# script calls "incompatible file format" (each measured in tests/kernel/test_student_guest.py).
READABLE = "$T $T/dynamic_events $T/kprobe_events $T/uprobe_events $T/README $T/printk_formats $T/saved_cmdlines"


def denied_hint() -> str:
    """The set-ups an administrator can choose, each with its exact commands (perf-security.rst's)."""
    # Debian's patch (kernel/events/core.c): above 2 no capability but CAP_SYS_ADMIN opens a perf event at all
    lower = "sudo sysctl kernel.perf_event_paranoid=2 && " if (paranoid() or 0) > 2 else ""
    return ("ask the administrator for one of: (1) sudo sysctl kernel.perf_event_paranoid=-1 (every user may "
            "sample every tracepoint, system-wide), with the events readable to your group (GROUP): "
            f"T=/sys/kernel/tracing && sudo chgrp GROUP {READABLE} && sudo chmod g+rX {READABLE} && "
            "sudo chgrp -R GROUP $T/events && sudo chmod -R g+rX $T/events; "
            "or (2) a perf binary with capabilities for a perf_users group, which kprobe-tui runs as its reader (found on "
            f"PATH, or named by KPROBE_TUI_PERF): {lower}sudo groupadd perf_users && sudo chgrp perf_users /usr/bin/perf && "
            "sudo chmod o-rwx /usr/bin/perf && sudo setcap cap_perfmon,cap_sys_ptrace,cap_syslog=ep /usr/bin/perf && "
            "sudo usermod -aG perf_users $USER, with the events readable to perf_users as in (1) "
            "(Documentation/admin-guide/perf-security.rst)")


def _open_error(err: int, name: str, cpu: int) -> UserError:
    level = paranoid()
    if err in (errno.EACCES, errno.EPERM):
        now = f"kernel.perf_event_paranoid is {level}" if level is not None else "kernel.perf_event_paranoid is unreadable"
        needs = ("CAP_SYS_ADMIN (above 2, a distribution's patch, no other capability opens a perf event)"
                 if level is not None and level > 2 else "CAP_PERFMON")
        return UserError(f"the kernel refuses to let you sample {name} on every CPU ({os.strerror(err)}): {now}, and "
                         f"sampling a tracepoint's raw data system-wide needs -1 or {needs}", denied_hint())
    if err == errno.ENOENT or err == errno.EINVAL:
        return UserError(f"the kernel has no tracepoint for {name} any more ({os.strerror(err)})", "list the events again (kprobe-tui list)")
    if err == errno.EMFILE or err == errno.ENFILE:
        return UserError(f"out of file descriptors opening {name} on CPU {cpu}: one is needed per event and CPU",
                         "follow fewer events, or raise the limit (ulimit -n)")
    if err == errno.ENOSYS:
        return UserError("this kernel has no perf_event_open (CONFIG_PERF_EVENTS is off)", denied_hint())
    return UserError(f"perf_event_open of {name} on CPU {cpu} failed: {os.strerror(err)}")


def _perf_event_open(attr: PerfAttr, cpu: int, group_fd: int = -1) -> int:
    number = SYSCALL_PERF_EVENT_OPEN.get(platform.machine())
    if number is None:
        raise UserError(f"reading events through perf_event_open is supported on x86-64 only, not {platform.machine()}",
                        "ask for a trace instance instead (write access to tracefs/instances)")
    fd = _libc.syscall(number, ctypes.byref(attr), -1, cpu, group_fd, PERF_FLAG_FD_CLOEXEC)
    if fd < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return int(fd)


def _ioctl(fd: int, request: int, argument: int | bytes | None) -> None:
    if _libc.ioctl(fd, request, argument) < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


class Ring:
    """One CPU's mmap'd ring buffer: a control page, then ``pages`` pages of records."""

    def __init__(self, fd: int, cpu: int, pages: int) -> None:
        self.cpu = cpu
        self.page = mmap.PAGESIZE
        self.size = pages * self.page
        self.map = mmap.mmap(fd, self.page + self.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)

    def drain(self) -> bytes:
        """The bytes between data_tail and data_head, unwrapped; the ring is then free again."""
        head = U64.unpack_from(self.map, DATA_HEAD)[0]
        tail = U64.unpack_from(self.map, DATA_TAIL)[0]
        if head == tail:
            return b""
        start, length = self.page + tail % self.size, head - tail
        end = self.page + self.size
        if start + length <= end:
            data = self.map[start:start + length]
        else:  # the records run past the ring's end and go on at its start
            data = self.map[start:end] + self.map[self.page:self.page + length - (end - start)]
        U64.pack_into(self.map, DATA_TAIL, head)
        return data

    def close(self) -> None:
        self.map.close()


def parse_records(data: bytes, samples: list[Sample], batch: Batch) -> int:
    """Appends the samples in ``data`` (records one after another), learns names into ``batch``; returns the count lost."""
    lost, at, end = 0, 0, len(data)
    while at + HEADER.size <= end:
        kind, _misc, size = HEADER.unpack_from(data, at)
        if size < HEADER.size or at + size > end:
            break  # cannot happen with the kernel's rings; a cut record is not read past
        body = at + HEADER.size
        if kind == RECORD_SAMPLE and size >= HEADER.size + SAMPLE.size:
            pid, tid, time_ns, sample_cpu, _, raw_size = SAMPLE.unpack_from(data, body)
            raw = body + SAMPLE.size
            samples.append(Sample(pid, tid, time_ns, sample_cpu, data[raw:min(raw + raw_size, at + size)]))
        elif kind == RECORD_LOST and size >= HEADER.size + LOST.size:
            lost += LOST.unpack_from(data, body)[1]
        elif kind == RECORD_LOST_SAMPLES and size >= HEADER.size + 8:
            lost += U64.unpack_from(data, body)[0]
        elif kind == RECORD_COMM and size > HEADER.size + COMM_IDS.size + COMM_ID.size:
            # the name, then the sample_id of SAMPLE_TYPE (sample_id_all): pid, tid, time, cpu
            _pid, tid = COMM_IDS.unpack_from(data, body)
            _, _, time_ns, _, _ = COMM_ID.unpack_from(data, at + size - COMM_ID.size)
            batch.learn(tid, time_ns, data[body + COMM_IDS.size:at + size - COMM_ID.size])
        at += size
    return lost


class TracepointSampler:
    """Tracepoints sampled on every online CPU, one ring a CPU; ``close()`` (or the process's end) removes all.

    Each CPU's ring belongs to a dummy software event that also reports exec'd names (PERF_RECORD_COMM),
    as perf record's side-band event does; the tracepoints write into it (PERF_EVENT_IOC_SET_OUTPUT), so
    one of them can be closed and opened again (a new filter) without losing the ring.
    """

    def __init__(self, events: dict[str, int], pages: int | None = None, cpus: list[int] | None = None) -> None:
        """``events``: name ("group/event", for messages) -> tracepoint id. Opens disabled; ``enable()`` starts."""
        self.pages = pages or ring_pages()
        self.ids: dict[str, int] = {}
        self.fds: dict[str, list[int]] = {}
        self.filters: dict[str, str] = {}
        self.rings: dict[int, Ring] = {}  # cpu -> its ring
        self.ring_fds: dict[int, int] = {}  # cpu -> the dummy event its ring is mapped from
        self.poller = select.poll()
        self.enabled = False
        try:
            self._open_rings(cpus if cpus is not None else online_cpus(), next(iter(events), "a tracepoint"))
            for name, ident in events.items():
                self.add(name, ident)
        except BaseException:
            self.close()
            raise

    def _open_rings(self, cpus: list[int], name: str) -> None:
        attr = PerfAttr(type=PERF_TYPE_SOFTWARE, size=ctypes.sizeof(PerfAttr), config=PERF_COUNT_SW_DUMMY,
                        sample_type=SAMPLE_TYPE, flags=FLAG_COMM | FLAG_COMM_EXEC | FLAG_WATERMARK | FLAG_SAMPLE_ID_ALL,
                        wakeup_watermark=self.pages * mmap.PAGESIZE // 4)
        for cpu in cpus:
            fd = self._open(attr, cpu, name)
            if fd is None:
                continue
            self.ring_fds[cpu] = fd
            try:
                self.rings[cpu] = Ring(fd, cpu, self.pages)
            except OSError as exc:
                raise UserError(f"cannot map a ring buffer of {self.pages} pages on CPU {cpu}: {exc.strerror}",
                                "kernel.perf_event_mlock_kb bounds the pages each user may lock (516 KiB a CPU by "
                                "default): set KPROBE_TUI_PERF_PAGES to a smaller power of two") from None
            self.poller.register(fd, select.POLLIN)

    @staticmethod
    def _open(attr: PerfAttr, cpu: int, name: str) -> int | None:
        """The event on ``cpu``; None when the CPU went offline since the list was read."""
        try:
            return _perf_event_open(attr, cpu)
        except OSError as exc:
            if exc.errno == errno.ENODEV:
                return None
            raise _open_error(exc.errno or 0, name, cpu) from None

    def _open_event(self, name: str, ident: int, expression: str) -> list[int]:
        """``ident`` opened on every ring's CPU, writing into the ring, filtered by ``expression``; disabled."""
        attr = PerfAttr(type=PERF_TYPE_TRACEPOINT, size=ctypes.sizeof(PerfAttr), config=ident, sample_period=1,
                        sample_type=SAMPLE_TYPE, flags=FLAG_DISABLED)
        opened: list[int] = []
        try:
            for cpu, ring_fd in self.ring_fds.items():
                fd = self._open(attr, cpu, name)
                if fd is None:
                    continue
                opened.append(fd)
                _ioctl(fd, IOC_SET_OUTPUT, ring_fd)
                if expression:
                    _ioctl(fd, IOC_SET_FILTER, expression.encode() + b"\0")
        except BaseException:
            _close_all(opened)
            raise
        return opened

    def add(self, name: str, ident: int) -> None:
        """Sample one more event: disabled until ``enable``, or at once when the others are enabled."""
        if name in self.fds:
            return
        self.fds[name] = self._open_event(name, ident, "")
        self.ids[name] = ident
        if self.enabled:
            self._each(name, IOC_ENABLE)

    def _each(self, name: str, request: int) -> None:
        for fd in self.fds[name]:
            _ioctl(fd, request, None)

    def enable(self) -> None:
        for name in self.fds:
            self._each(name, IOC_ENABLE)
        self.enabled = True

    def disable(self) -> None:
        for name in self.fds:
            self._each(name, IOC_DISABLE)
        self.enabled = False

    def remove(self, name: str) -> None:
        """Stop sampling one event."""
        _close_all(self.fds.pop(name, []))
        self.ids.pop(name, None)
        self.filters.pop(name, None)

    def set_filter(self, name: str, expression: str) -> None:
        """The kernel filter of one event ("" for none), in tracefs's filter language; OSError (EINVAL) when refused.

        The kernel takes one filter in a perf event's life (a second is EEXIST), so the event is opened
        anew with it, enabled, and only then is the old one closed: no event is missed in between, and
        none counted twice (the old one is disabled first)."""
        if self.filters.get(name, "") == expression:
            return
        fresh = self._open_event(name, self.ids[name], expression)
        old, self.fds[name] = self.fds[name], fresh
        if self.enabled:
            for fd in old:
                _ioctl(fd, IOC_DISABLE, None)
            self._each(name, IOC_ENABLE)
        _close_all(old)
        self.filters[name] = expression

    def poll_fds(self) -> list[int]:
        return list(self.ring_fds.values())

    def own_pids(self) -> set[int]:
        """Processes of ours that sample: none besides this one."""
        return set()

    def wait(self, timeout: float) -> None:
        """Until a ring passes its watermark, or ``timeout`` seconds."""
        self.poller.poll(timeout * 1000)

    def read(self) -> Batch:
        """Everything the rings hold now."""
        batch = Batch([], 0, {})
        for ring in self.rings.values():
            per_cpu: list[Sample] = []
            batch.lost += parse_records(ring.drain(), per_cpu, batch)
            batch.samples.append(per_cpu)
        return batch

    def close(self) -> None:
        """Unmaps the rings and closes every descriptor: the kernel drops the events with them."""
        for fds in self.fds.values():
            _close_all(fds)
        for ring in self.rings.values():
            ring.close()
        _close_all(list(self.ring_fds.values()))
        self.fds, self.ids, self.filters, self.rings, self.ring_fds = {}, {}, {}, {}, {}


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)


def probe_permission(event_dir: Path) -> UserError | None:
    """Why this user cannot sample the event in ``event_dir`` system-wide (None: it can): opens it on one CPU, closes it."""
    name = f"{event_dir.parent.name}/{event_dir.name}"
    try:
        TracepointSampler({name: read_event_id(event_dir)}, pages=1, cpus=online_cpus()[:1]).close()
    except UserError as exc:
        return exc
    return None
