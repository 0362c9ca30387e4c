"""Stacks as a key: ``count SPEC --by stack[,comm]`` (and ``hist``, ``latency``), counted in the kernel where it can.

The kernel engine keys a hist trigger by the stack (``keys=stacktrace``, spelled ``common_stacktrace``
from 6.4: read from the tracefs README, which names the one it takes) and, by comm, by the probe's
own capture of ``$comm``. The user-space engine turns on the instance's ``stacktrace`` option and
counts the `` => frame`` lines after each event. A uprobe's stack is the program's: the kernel keys
no table by a user stack, so uprobes take the user-space engine with ``userstacktrace`` and
addresses named here (``UserFrames``). The kernel walks user stacks by frame pointers only: a program
built without them gives its probed function and the caller we capture (``CALLER_ARGUMENT``), no more.
"""

from __future__ import annotations

import bisect
import functools
import os
import re
import threading
import time
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from kprobe_tui.aggregate.histfile import parse_hist, table_texts, trigger_params
from kprobe_tui.aggregate.kernel_engine import BUFFER_KB as KERNEL_BUFFER_KB
from kprobe_tui.aggregate.kernel_engine import _InstanceOwner, extreme, field_number
from kprobe_tui.aggregate.model import STACK_KEY, Aggregation, Field
from kprobe_tui.aggregate.offer import Choice, choose
from kprobe_tui.aggregate.result import Entry, Result, Stats, summarize
from kprobe_tui.aggregate.run import RATE_HISTORY, ProbeRun, Sample
from kprobe_tui.aggregate.tally import Tally
from kprobe_tui.aggregate.targets import CALLER_ARGUMENT, COMM_ARGUMENT, Target, Targets
from kprobe_tui.aggregate.triggers import SYNTHETIC_COMM, LatencyTriggers, Trigger
from kprobe_tui.aggregate.user_engine import BUFFER_KB, InstanceReader
from kprobe_tui.aggregate.userspace import latency_in_unit
from kprobe_tui.debuginfo.scope import DebugInfo, open_debuginfo
from kprobe_tui.elf import ElfFile, NotElf, Segment
from kprobe_tui.errors import UserError
from kprobe_tui.kernel.tracefs import Tracefs
from kprobe_tui.stream import filterexpr
from kprobe_tui.stream.parser import Event, LineParser
from kprobe_tui.stream.stacks import StackTable, add_event_stack, max_stacks, parse_hist_stack_buckets, parse_hist_stacks

if TYPE_CHECKING:
    from kprobe_tui.debuginfo.debuginfod import Client

_USER_ADDRESS = re.compile(r"<([0-9a-f]{1,16})>")  # a user frame: " => <0000560eb36cf139>"
_KERNEL_FRAME = re.compile(r"([A-Za-z_][\w.]{0,200})\+0x([0-9a-f]{1,8})")  # "vfs_read+0x5"; not "f+0x5 [mod]"
# "55d0c8a4b000-55d0c8a4c000 r-xp 00001000 fd:01 1234   /usr/bin/prog": file mappings only
_MAPS_LINE = re.compile(r"([0-9a-f]{1,16})-([0-9a-f]{1,16}) \S+ ([0-9a-f]{1,16}) \S+ [1-9]\d* +(/.*)$")
# The page where a return probe sends a call back (its caller's return address is swapped for it while the call
# lasts): a frame there is an outer call of a function with a return probe on it, whose caller the walk cannot see.
UPROBES_PAGE = "[uprobes]"
_UPROBES_LINE = re.compile(r"([0-9a-f]{1,16})-([0-9a-f]{1,16}) \S+ [0-9a-f]+ \S+ 0 +\[uprobes\]$")
MAX_PROGRAMS = 64  # programs and libraries whose symbols (and DWARF) are kept while a run lasts
MAX_PROCESSES = 1024  # processes whose maps are kept
MAX_NAMES = 100_000  # (pid, address) -> name answers kept
MAX_MAPS_BYTES = 1 << 22
MAX_SOURCE_NAME = 255  # characters of a frame's source file name (NAME_MAX): DWARF's may be any length
STT_FUNC = 2
# The kernel's largest hist table (TRACING_MAP_BITS_MAX: 2^17 entries); it rounds a size up to a power of
# two and allocates every entry up front: a stack key is 16 frames of 8 bytes, so 10k stacks cost ~3 MB.
MAX_TABLE_SIZE = 1 << 17
# A user stack this shallow at most, on every hit, is a program walked without frame pointers.
SHALLOW_FRAMES = 2
MAX_THREADS_IN_CALLS = 1 << 16  # a latency by stack: threads whose entry (and its stack) waits for its return


def kernel_stack_key(readme: str) -> str:
    """The hist key of the kernel stack: the README names the special string it takes."""
    return "common_stacktrace" if "'common_stacktrace'" in readme else "stacktrace"


class UserFrames:
    """User stack addresses as ``function+0xN [prog]``: the mapping from the process's /proc/PID/maps, the
    function from the file's symbol table. An address that fits no function (a stripped library) is
    ``prog+0xFILEOFFSET``; one whose process is gone (or not ELF) stays as the kernel printed it.

    Where the file's DWARF is at hand (the file itself built with -g, its debug file installed, or one in the
    debuginfod cache: nothing is downloaded while the ring fills) the frame's ``file:line`` follows, as perf
    report lays out a callchain's srcline: ``via_a+0x9 [prog] work.c:12``. Where the address is in code the
    compiler inlined there, each inlined function follows as a frame of its own, as ``addr2line -i`` and perf
    report's ``--inline`` give them: ``twice [prog] (inlined) work.c:7``, the line above it then being where
    its caller calls it. Always, not behind an option: one address names the same frames every time, so no
    two stacks merge or split, and it costs one open of the DWARF per program (libc 2.36's separate debug
    file: 0.13 s). A return address is given the line of its call (address-1), as gdb's backtrace gives a
    caller's line; perf 6.1 prints the return address's own line, the statement after the call.

    The kernel's own naming (``sym-userobj``) gives the file but an offset into the mapping, and takes the
    traced process's mmap lock for every frame it prints; one read of the maps a process does here."""

    def __init__(self) -> None:
        self._programs: dict[str, tuple[list[Segment], list[tuple[int, int, str]]] | None] = {}
        self._debuginfo: dict[str, DebugInfo | None] = {}
        self._maps: dict[int, tuple[float, list[tuple[int, int, int, str]]]] = {}
        self._names: dict[tuple[int, str, bool], tuple[str, ...]] = {}

    def name(self, pid: int, frame: str, returned: bool = False) -> tuple[str, ...]:
        """A frame the kernel printed, named, and the functions inlined at it (outermost first); ``returned``:
        it is a return address, not where the thread is."""
        key = (pid, frame, returned)
        named = self._names.get(key)
        if named is None:
            match = _USER_ADDRESS.fullmatch(frame.strip())
            named = self.address(pid, int(match[1], 16), returned) if match else (frame,)
            if len(self._names) < MAX_NAMES:
                self._names[key] = named
        return named

    def address(self, pid: int, address: int, returned: bool = False) -> tuple[str, ...]:
        mapping = self._mapping(pid, address)
        if mapping is None:
            return (f"<{address:016x}>",)
        start, _, file_offset, path = mapping
        if path == UPROBES_PAGE:
            return (UPROBES_PAGE,)  # as perf names it
        offset = address - start + file_offset
        program = self._program(path)
        segments, functions = program if program else ([], [])
        value = next((segment.vaddr + offset - segment.offset for segment in segments
                      if segment.offset <= offset < segment.offset + segment.filesz), None)
        if value is None:
            return (f"{os.path.basename(path)}+{offset:#x}",)
        index = bisect.bisect_right(functions, (value, 1 << 64)) - 1
        if index >= 0 and functions[index][0] <= value < functions[index][0] + functions[index][1]:
            start_value, _, function = functions[index]
            named = f"{function}+{value - start_value:#x} [{os.path.basename(path)}]"
        else:
            named = f"{os.path.basename(path)}+{offset:#x}"
        return with_inlined(named, self._source_frames(path, value - 1 if returned else value),
                            f" [{os.path.basename(path)}]")

    def _source_frames(self, path: str, value: int) -> list[tuple[str | None, str]]:
        """``source_frames_text`` of a link-time address of the file, [] without DWARF."""
        if path not in self._debuginfo:
            if len(self._debuginfo) >= MAX_PROGRAMS:
                return []
            try:
                self._debuginfo[path] = open_debuginfo(binary=path, debuginfod=_debuginfod_cache_only)
            except (UserError, OSError):  # no DWARF on disk, not an x86-64 ELF file, gone since
                self._debuginfo[path] = None
        info = self._debuginfo[path]
        frames = source_frames_text(info, value) if info is not None else []
        if frames is None:  # corrupt DWARF: the program's frames keep their names, without lines
            self._debuginfo[path] = None
        return frames or []

    def _mapping(self, pid: int, address: int) -> tuple[int, int, int, str] | None:
        """The file mapping ``address`` is in; the maps are read again (at most once a second) on a miss:
        a library loaded since."""
        read_at, maps = self._maps.get(pid, (0.0, []))
        for _ in range(2):
            for mapping in maps:
                if mapping[0] <= address < mapping[1]:
                    return mapping
            if time.monotonic() - read_at < 1.0 or (pid not in self._maps and len(self._maps) >= MAX_PROCESSES):
                return None
            read_at, maps = time.monotonic(), _file_mappings(pid)
            self._maps[pid] = (read_at, maps)
        return None

    def _program(self, path: str) -> tuple[list[Segment], list[tuple[int, int, str]]] | None:
        if path not in self._programs:
            if len(self._programs) >= MAX_PROGRAMS:
                return None
            try:
                elf = ElfFile(path)
                table = elf.symbols(".symtab") or elf.symbols(".dynsym")
                functions = sorted((value, size, table.name(name_at)) for name_at, _, _, _, value, size
                                   in table.of_types(STT_FUNC) if size) if table else []
                self._programs[path] = (elf.load_segments(), functions)
            except (OSError, NotElf):
                self._programs[path] = None
        return self._programs[path]


class KernelFrames:
    """Kernel frames (``vfs_read+0x5``) with their ``file:line`` where the kernel's debug info is on disk (``-k``,
    its debug package, or the debuginfod cache: nothing is downloaded), laid out as UserFrames lays out a
    program's; a module's frame or a bare address stays as it is. A frame's address is its function's in the
    vmlinux's symbol table plus its offset, whatever KASLR moved; a return address is given its call's line."""

    def __init__(self, vmlinux: str | None = None) -> None:
        self._vmlinux = vmlinux
        self._info: DebugInfo | None = None
        self._looked = False
        self._functions: dict[str, int] = {}  # function -> its address in the vmlinux
        self._names: dict[tuple[str, bool], tuple[str, ...]] = {}

    def name(self, frame: str, returned: bool) -> tuple[str, ...]:
        """The frame with its line, then the functions inlined at it (as UserFrames names them)."""
        key = (frame, returned)
        named = self._names.get(key)
        if named is None:
            named = with_inlined(frame, self._source_frames(frame, returned))
            if len(self._names) < MAX_NAMES:
                self._names[key] = named
        return named

    def stack(self, stack: tuple[str, ...]) -> tuple[str, ...]:
        """A stack, outermost first: every frame but the innermost (where the probe fired) is a return address."""
        innermost = len(stack) - 1
        return tuple(name for at, frame in enumerate(stack) for name in self.name(frame, at < innermost))

    def _source_frames(self, frame: str, returned: bool) -> list[tuple[str | None, str]]:
        match = _KERNEL_FRAME.fullmatch(frame)
        info = self._debuginfo() if match else None
        if match is None or info is None:
            return []
        start = self._functions.get(match[1])
        if start is None:
            return []
        frames = source_frames_text(info, start + int(match[2], 16) - (1 if returned else 0))
        if frames is None:  # corrupt DWARF: frames keep their names, without lines
            self._info = None
        return frames or []

    def _debuginfo(self) -> DebugInfo | None:
        """Looked for once; a look cut short (Ctrl-C while the 6.1 guest's took 3 s) is taken again."""
        if not self._looked:
            functions: dict[str, int] = {}
            info: DebugInfo | None = None
            try:
                info = open_debuginfo(vmlinux=self._vmlinux, debuginfod=_debuginfod_cache_only)
                for function, address in info.symbols.names():
                    functions.setdefault(function, address)
            except (UserError, OSError):  # no debug vmlinux on disk: the frames are the kernel's
                info = None
            self._info, self._functions, self._looked = info, functions, True
        return self._info


def source_frames_text(info: DebugInfo, address: int) -> list[tuple[str | None, str]] | None:
    """``source_frames`` of a link-time address with each ``file:line`` as perf prints a srcline (the file's
    base name); [] where no line covers it, None when the DWARF is corrupt."""
    try:
        found = info.source_frames(address)
    except UserError:
        return None
    return [(name and name[:MAX_SOURCE_NAME], f"{os.path.basename(file)[:MAX_SOURCE_NAME]}:{line}")
            for name, (file, line) in found]


def with_inlined(frame: str, lines: list[tuple[str | None, str]], where: str = "") -> tuple[str, ...]:
    """The frame with its line, then each function inlined at its address, outermost first:
    ``name{where} (inlined) file:line``."""
    if not lines:
        return (frame,)
    (_, line), *inlined = lines
    return (f"{frame} {line}", *(f"{name}{where} (inlined) {line}" for name, line in inlined))


def _debuginfod_cache_only() -> Client:
    """A debuginfod client that answers from its cache only (made only for a file without DWARF of its own)."""
    from kprobe_tui.debuginfo.debuginfod import Client  # here, not above: the client module costs ~8 ms to import (-X importtime)

    return Client(offline=True)


def _file_mappings(pid: int) -> list[tuple[int, int, int, str]]:
    """(start, end, file offset, path) of each file mapping of a process, and its return probes' page
    (``UPROBES_PAGE``); [] once it is gone."""
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as maps:
            lines = maps.read(MAX_MAPS_BYTES).splitlines()
    except OSError:
        return []
    mappings = []
    for line in lines:
        match = _MAPS_LINE.match(line)
        if match:
            mappings.append((int(match[1], 16), int(match[2], 16), int(match[3], 16), match[4]))
        elif match := _UPROBES_LINE.match(line):
            mappings.append((int(match[1], 16), int(match[2], 16), 0, UPROBES_PAGE))
    return mappings


def probed(target: Target) -> str | None:
    """The kernel function a target probes, whose frame is a stack's innermost (None for a uprobe)."""
    probe = target.probe
    return None if probe.spec.is_uprobe else probe.function or probe.spec.function


class KernelStackEngine(_InstanceOwner):
    """Hits per kernel stack (and comm) in one hist table per probe, in our instance; a latency by stack in a
    synthetic event's tables (``latency_triggers`` with the entry's stack)."""

    name = "kernel"
    method = "hist"

    def __init__(self, top: Tracefs, targets: list[Target], conditions: dict[str, str], by_comm: bool, limit: int,
                 value: str | None = None, latency: Aggregation | None = None) -> None:
        """``value``: the captured argument of a histogram by stack, the table's last key (its exact values).
        ``latency``: a latency keyed by stack (and comm), its unit."""
        super().__init__(top)
        self.latency = latency
        self._plan: LatencyTriggers | None = None
        self.targets = targets
        self.conditions = conditions
        self.comm_key = COMM_ARGUMENT if by_comm else None
        self.limit = limit
        self.value = value
        readme = top.read("README") if top.exists("README") else ""
        self.keys = (kernel_stack_key(readme), *((COMM_ARGUMENT,) if by_comm else ()), *((value,) if value else ()))
        self._layouts: dict[str, dict[str, tuple[int, bool]]] = {}  # event -> its fields' sizes and signs

    def start(self) -> None:
        self.instance.create(KERNEL_BUFFER_KB)
        if self.latency is not None:
            self._plan = self.add_latency(self.latency, self.targets, self.conditions, self.comm_key, self.keys[0])
            return
        for target in self.targets:
            self._layouts[target.event] = filterexpr.field_layout(self.instance.event_format(target.group, target.event))
            self.add(Trigger(target.group, target.event, self.keys, filter=self.conditions.get(target.event, ""),
                             size=min(self.limit, MAX_TABLE_SIZE)))

    def collect(self) -> StackTable:
        """Every stack so far (the kernel's tables are cumulative)."""
        if self._plan is not None:
            return self._collect_latency(self._plan)
        table = StackTable(self.limit)
        for target in self.targets:
            layout = self._layouts[target.event].get(self.value) if self.value else None
            parse_hist_stacks(self.triggers.hist(target.group, target.event), table, self.comm_key, probed(target),
                              self.value, functools.partial(field_number, layout=layout))
        return table

    def _collect_latency(self, plan: LatencyTriggers) -> StackTable:
        """Hits and sums per (stack, comm, log2 bucket), and the exact latencies the second table kept (for
        the least and the greatest); returns that generated no synthetic event are the unmatched ones."""
        entry = next(t for t in self.targets if t.role == "entry")
        comm = SYNTHETIC_COMM if self.comm_key else None
        table, exact = StackTable(self.limit), StackTable(self.limit)
        for trigger, text in table_texts(self.triggers.hist("synthetic", plan.synthetic.name)):
            keys = trigger_params(trigger).get("keys")
            if keys == ",".join(plan.table.keys):
                parse_hist_stack_buckets(text, table, comm, probed(entry), "lat1", "lat")
            elif keys == ",".join(plan.extremes.keys):
                parse_hist_stacks(text, exact, comm, probed(entry), "lat")
        table.values = {key: latencies for key, latencies in exact.values.items() if key in table.counts}
        returns = next(found for found in parse_hist(self.triggers.hist(plan.returns.group, plan.returns.event))
                       if plan.returns.matches(found))
        table.unmatched = max(0, returns.hits - sum(table.counts.values()) - table.dropped - table.garbled)
        return table


class UserStackEngine(InstanceReader):
    """Hits per stack counted here, from the stack the kernel prints after each event in our instance."""

    def __init__(self, top: Tracefs, targets: list[Target], kernel_filters: dict[str, str], by_comm: bool,
                 limit: int, user_stacks: bool, value: str | None = None, latency_unit: str | None = None) -> None:
        """``value``: the captured argument of a histogram by stack (a hit without a number is not counted).
        ``latency_unit``: a latency by stack, each entry's stack kept until its thread returns (then its time
        in that unit is the value); a nested call's entry replaces the outer one's, as ``latency`` times it."""
        super().__init__(top)
        self.targets = targets
        self.kernel_filters = kernel_filters
        self.by_comm = by_comm
        self.user_stacks = user_stacks
        self.value = value
        self.table = StackTable(limit)
        self.deepest = 0  # frames of the deepest user stack walked: how a program without frame pointers shows
        self._probed = {target.event: probed(target) for target in targets}
        self._user_frames = UserFrames()
        self._at_entry = {target.event for target in targets if target.probe.function_offset == 0}
        self._at_return = {target.event for target in targets if target.probe.spec.is_return}
        self.latency_unit = latency_unit
        self._entries = {target.event for target in targets if target.role == "entry"}
        self._in_call: dict[int, tuple[float, str, Sequence[str]]] = {}  # thread -> its entry's time, event and stack
        self._unread = 0  # records still in the ring when the run ended
        self._parser = LineParser()
        self._lock = threading.Lock()  # the reader thread feeds, the caller collects

    def start(self) -> None:
        stacks = {"userstacktrace": True, "sym-userobj": False} if self.user_stacks else {"stacktrace": True}
        self.instance.create(BUFFER_KB, {"record-tgid": False, "sym-offset": True, **stacks})
        try:
            self._start_reader(self._feed)
            for target in self.targets:
                if self.kernel_filters.get(target.event):
                    self.instance.set_filter(target.group, target.event, self.kernel_filters[target.event])
                self.instance.enable(target.group, target.event)
        except BaseException:
            self.stop()
            raise

    def _feed(self, data: bytes) -> None:
        with self._lock:
            self._count(self._parser.feed(data.decode("utf-8", "backslashreplace").split("\n")))

    def _count(self, events: list[Event]) -> None:
        for event in events:
            if event.stack is None:
                continue
            if self.latency_unit is not None:
                self._time(event, self.latency_unit)
                continue
            number: int | None = None
            if self.value:
                value = event.args.get(self.value)
                if not isinstance(value, int):
                    continue  # a hit whose value could not be read (a fault) is in no bucket
                number = value
            comm = self._comm(event)
            frames = self._user_stack(event) if self.user_stacks else event.stack
            add_event_stack(self.table, frames, comm, self._probed.get(event.event), number)

    def _time(self, event: Event, unit: str) -> None:
        """A latency by stack: an entry's stack waits for its thread's return, which adds its time under it."""
        if event.event in self._entries:
            if event.pid in self._in_call or len(self._in_call) < MAX_THREADS_IN_CALLS:
                stack = self._user_stack(event) if self.user_stacks else event.stack or ()
                self._in_call[event.pid] = (event.ts, event.event, stack)
            return
        entered = self._in_call.pop(event.pid, None)
        if entered is None:
            self.table.unmatched += 1
            return
        started, entry, entry_stack = entered
        add_event_stack(self.table, entry_stack, self._comm(event), self._probed.get(entry),
                        latency_in_unit(started, event.ts, unit))

    def _comm(self, event: Event) -> str | None:
        """The comm key: the probe's capture where it made one (a return's), else the event's."""
        return str(event.args.get(COMM_ARGUMENT, event.comm)).strip('"') if self.by_comm else None

    def _user_stack(self, event: Event) -> list[str]:
        """The user stack named, with the caller of a function probed at its entry put back in (it is
        the return address on top of the stack: the kernel's walk starts at the caller's frame). Every
        frame but the first is a return address; the first too at a return probe (where the thread goes)."""
        at_return = event.event in self._at_return
        frames = [self._user_frames.name(event.pid, frame, returned=index > 0 or at_return)
                  for index, frame in enumerate(event.stack or ())]
        caller = event.args.get(CALLER_ARGUMENT) if event.event in self._at_entry else None
        if isinstance(caller, int) and frames:
            frames.insert(1, self._user_frames.name(event.pid, f"<{caller:016x}>", returned=True))
        self.deepest = max(self.deepest, len(frames))  # the kernel's walk, before the inlined functions are named
        return [name for names in frames for name in reversed(names)]  # innermost first, as the kernel's

    def collect(self) -> StackTable:
        """Every stack so far; the newest event waits for its stack lines unless a whole read brought none."""
        if self._error:
            raise UserError(self._error)
        with self._lock:
            self._count(self._parser.flush_if_quiet())
            # The ring counts records, and each event is two: it, then its stack.
            lost = ((self.reader.lost if self.reader else 0) + self._unread) // 2
            # A copy, values too: the reader thread goes on adding to these Counters, and an interval is this
            # copy less the previous one (shared, every interval after the first came out empty).
            return replace(self.table, counts=dict(self.table.counts), lost=lost,
                           values={key: Counter(values) for key, values in self.table.values.items()})

    def drain(self, limit: float = 2.0) -> None:
        """Let the reader take what the ring still holds, for ``limit`` seconds; what it could not is
        counted lost (in the 6.12 guest, 17k of dd's 20k hits were still there when dd ended)."""
        super().drain(limit)
        self._stop_reader()  # what the ring holds from here on is what was never read
        with self._lock:
            self._count(self._parser.flush())
            self._unread = self._buffered()


StackEngine = KernelStackEngine | UserStackEngine


class StackRun(ProbeRun[StackEngine]):
    """Probes, the engine that counts their stacks, and the counts: ``start()``, ``collect()``, ``stop()``."""

    def __init__(self, top: Tracefs, targets: Targets, by_comm: bool = False, filter_text: str = "",
                 engine: str = "auto", histogram: Aggregation | None = None) -> None:
        """``histogram``: a hist or a latency keyed by stack (``hist SPEC FIELD --by stack``, ``latency FUNC --by
        stack``): its value or unit and its buckets; its keys are ``stack`` (and ``comm``). Kernel frames get their
        lines from the running kernel's debug info."""
        super().__init__(top, targets, filter_text, engine)
        self.kernel_frames = None if targets.uprobes else KernelFrames()
        self.by_comm = by_comm
        self.histogram = histogram
        self.value = targets.arguments[histogram.histogram_value.name] if histogram and histogram.kind == "hist" else None
        self.latency_unit = histogram.unit if histogram and histogram.kind == "latency" else None
        self.limit = max_stacks()
        self.rates: deque[float] = deque(maxlen=RATE_HISTORY)
        self.sampled = StackTable(self.limit)  # the counts at the previous sample

    def _choose(self) -> Choice:
        refusal = self._plan_filter()
        if refusal:
            raise UserError(f"the kernel cannot apply the filter ({refusal})",
                            "counting stacks takes a filter the kernel can say (fields compared with constants)")
        if self.histogram is not None and self.latency_unit is not None and not self.targets.uprobes:
            return choose(self.requested, self.histogram, self.offer, profile_only=False, uprobes=False,
                          filter_refusal=None)
        if self.targets.uprobes:
            if self.requested not in ("auto", "user"):
                raise UserError(f"--engine {self.requested}: kernel tables key kernel stacks only; a uprobe's stack is the program's",
                                "use --engine user (or auto)")
            return Choice("user", "stream", "a uprobe's stack is the program's, which no kernel table keys: the kernel "
                                            "prints each hit's user stack (userstacktrace) and it is counted here")
        return choose(self.requested, Aggregation("count", keys=(Field("comm"),) if self.by_comm else ()), self.offer,
                      profile_only=False, uprobes=False, filter_refusal=None)

    def _engine(self, choice: Choice) -> StackEngine:
        if choice.method == "hist":
            return KernelStackEngine(self.top, self.targets.items, self._conditions(), self.by_comm, self.limit,
                                     self.value, self.histogram if self.latency_unit is not None else None)
        return UserStackEngine(self.top, self.targets.items, self._kernel_filters, self.by_comm, self.limit,
                               self.targets.uprobes, self.value, self.latency_unit)

    def collect(self) -> StackTable:
        with self._lock:
            return self._collect()

    def _collect(self) -> StackTable:
        if not self._running:
            raise RuntimeError("collect() or sample() before start() or after stop()")
        return self._named(self._running_engine()[1].collect())

    def _named(self, table: StackTable) -> StackTable:
        return table.restacked(self.kernel_frames.stack) if self.kernel_frames is not None else table

    def sample(self) -> Sample:
        """What ``AggregationRun.sample`` gives, so the statistics view drives either run: the counts since
        the previous sample and since the start, keyed by stack (a tuple of frames, outermost first)."""
        with self._lock:
            table = self._collect()
            now = time.time()
            sample = Sample(self.result(table.since(self.sampled), self._last, now), self.result(table, self._started, now))
            self.sampled, self._last = table, now
        self.rates.append(sample.rate)
        return sample

    def result(self, table: StackTable, start: float, end: float) -> Result:
        """The stacks as a count keyed by ``stack`` (and ``comm``), most hits first; or as the histogram's."""
        if self.histogram is not None:
            tally = Tally(dropped=table.dropped, lost=table.lost, unmatched=table.unmatched)
            for (stack, comm), buckets in table.grouped.items():  # the kernel's latency: log2 buckets and sums
                cell = tally.cell((stack,) if comm is None else (stack, comm))
                for bucket, hits in buckets.items():
                    cell.add_grouped(bucket, hits, 0)
                cell.total = table.sums[stack, comm]
                latencies = table.values.get((stack, comm), Counter())
                scheme = self.histogram.bucket_scheme
                cell.extend(extreme(scheme, buckets, latencies, min), extreme(scheme, buckets, latencies, max))
            for (stack, comm), values in table.values.items():
                if (stack, comm) not in table.grouped:
                    tally.cell((stack,) if comm is None else (stack, comm)).add_values(values)
            return summarize(self.histogram, tally, self.engine.name if self.engine else "", start, end)
        entries = tuple(Entry((stack,) if comm is None else (stack, comm), Stats(count)) for (stack, comm), count
                        in sorted(table.counts.items(), key=lambda item: item[1], reverse=True))
        return Result("count", self.engine.name if self.engine else "", start, end,
                      (STACK_KEY, "comm") if self.by_comm else (STACK_KEY,), None, entries,
                      Stats(sum(table.counts.values())), None, dropped=table.dropped, lost=table.lost)

    def stop(self) -> StackTable | None:
        """The last counts, then remove the triggers, the instance and the probes. Safe to call twice."""
        with self._lock:
            if not self._running:
                return None
            _, engine = self._running_engine()
            self._running = False
            try:
                if isinstance(engine, UserStackEngine):
                    engine.drain()
                return self._named(engine.collect())
            finally:
                try:
                    engine.stop()
                finally:
                    self._remove_probes()

    def shallow_note(self, table: StackTable) -> str:
        """What to say when user stacks came out shallow: the program has no frame pointers."""
        engine = self.engine
        if not isinstance(engine, UserStackEngine) or not engine.user_stacks or not table.counts:
            return ""
        if engine.deepest > SHALLOW_FRAMES:
            return ""
        return (f"the kernel's walk of the user stacks gave at most {engine.deepest} frame{'s' if engine.deepest != 1 else ''}: "
                "the program was most likely built without frame pointers, and the kernel walks user stacks by frame "
                "pointer only (rebuild it with -fno-omit-frame-pointer for whole stacks)")
