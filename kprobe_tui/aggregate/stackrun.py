"""Stacks as a key: ``count SPEC --by stack[,comm]``, counted in the kernel where it can.

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
import os
import re
import threading
import time
from collections import deque
from dataclasses import replace

from kprobe_tui.aggregate.kernel_engine import BUFFER_KB as KERNEL_BUFFER_KB
from kprobe_tui.aggregate.kernel_engine import _InstanceOwner
from kprobe_tui.aggregate.model import Aggregation, Field
from kprobe_tui.aggregate.offer import Choice, choose
from kprobe_tui.aggregate.result import Entry, Result, Stats
from kprobe_tui.aggregate.run import RATE_HISTORY, ProbeRun, Sample
from kprobe_tui.aggregate.targets import CALLER_ARGUMENT, COMM_ARGUMENT, Target, Targets
from kprobe_tui.aggregate.triggers import Trigger
from kprobe_tui.aggregate.user_engine import BUFFER_KB, InstanceReader
from kprobe_tui.elf import ElfFile, NotElf, Segment
from kprobe_tui.errors import UserError
from kprobe_tui.kernel.tracefs import Tracefs
from kprobe_tui.stream.parser import Event, LineParser
from kprobe_tui.stream.stacks import StackTable, add_event_stack, max_stacks, parse_hist_stacks

STACK_KEY = "stack"
_USER_ADDRESS = re.compile(r"<([0-9a-f]{1,16})>")  # a user frame: " => <0000560eb36cf139>"
# "55d0c8a4b000-55d0c8a4c000 r-xp 00001000 fd:01 1234   /usr/bin/prog": file mappings only
_MAPS_LINE = re.compile(r"([0-9a-f]{1,16})-([0-9a-f]{1,16}) \S+ ([0-9a-f]{1,16}) \S+ [1-9]\d* +(/.*)$")
MAX_PROGRAMS = 64  # programs and libraries whose symbols are kept while a run lasts
MAX_PROCESSES = 1024  # processes whose maps are kept
MAX_NAMES = 100_000  # (pid, address) -> name answers kept
MAX_MAPS_BYTES = 1 << 22
STT_FUNC = 2
# The kernel's largest hist table (TRACING_MAP_BITS_MAX: 2^17 entries); it rounds a size up to a power of
# two and allocates every entry up front: a stack key is 16 frames of 8 bytes, so 10k stacks cost ~3 MB.
MAX_TABLE_SIZE = 1 << 17
# A user stack this shallow at most, on every hit, is a program walked without frame pointers.
SHALLOW_FRAMES = 2


def kernel_stack_key(readme: str) -> str:
    """The hist key of the kernel stack: the README names the special string it takes."""
    return "common_stacktrace" if "'common_stacktrace'" in readme else "stacktrace"


class UserFrames:
    """User stack addresses as ``function+0xN [prog]``: the mapping from the process's /proc/PID/maps, the
    function from the file's symbol table. An address that fits no function (a stripped library) is
    ``prog+0xFILEOFFSET``; one whose process is gone (or not ELF) stays as the kernel printed it.

    The kernel's own naming (``sym-userobj``) gives the file but an offset into the mapping, and takes the
    traced process's mmap lock for every frame it prints; one read of the maps a process does here."""

    def __init__(self) -> None:
        self._programs: dict[str, tuple[list[Segment], list[tuple[int, int, str]]] | None] = {}
        self._maps: dict[int, tuple[float, list[tuple[int, int, int, str]]]] = {}
        self._names: dict[tuple[int, str], str] = {}

    def name(self, pid: int, frame: str) -> str:
        key = (pid, frame)
        named = self._names.get(key)
        if named is None:
            match = _USER_ADDRESS.fullmatch(frame.strip())
            named = self.address(pid, int(match[1], 16)) if match else frame
            if len(self._names) < MAX_NAMES:
                self._names[key] = named
        return named

    def address(self, pid: int, address: int) -> str:
        mapping = self._mapping(pid, address)
        if mapping is None:
            return f"<{address:016x}>"
        start, _, file_offset, path = mapping
        offset = address - start + file_offset
        program = self._program(path)
        for segment in program[0] if program else ():
            if segment.offset <= offset < segment.offset + segment.filesz:
                value = segment.vaddr + offset - segment.offset
                functions = program[1] if program else []
                index = bisect.bisect_right(functions, (value, 1 << 64)) - 1
                if index >= 0 and functions[index][0] <= value < functions[index][0] + functions[index][1]:
                    start_value, _, name = functions[index]
                    return f"{name}+{value - start_value:#x} [{os.path.basename(path)}]"
        return f"{os.path.basename(path)}+{offset:#x}"

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


def _file_mappings(pid: int) -> list[tuple[int, int, int, str]]:
    """(start, end, file offset, path) of each file mapping of a process; [] once it is gone."""
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
    return mappings


def probed(target: Target) -> str | None:
    """The kernel function a target probes, whose frame is a stack's innermost (None for a uprobe)."""
    probe = target.probe
    return None if probe.spec.is_uprobe else probe.function or probe.spec.function


class KernelStackEngine(_InstanceOwner):
    """Hits per kernel stack (and comm) in one hist table per probe, in our instance."""

    name = "kernel"
    method = "hist"

    def __init__(self, top: Tracefs, targets: list[Target], conditions: dict[str, str], by_comm: bool, limit: int) -> None:
        super().__init__(top)
        self.targets = targets
        self.conditions = conditions
        self.comm_key = COMM_ARGUMENT if by_comm else None
        self.limit = limit
        readme = top.read("README") if top.exists("README") else ""
        self.keys = (kernel_stack_key(readme), *((COMM_ARGUMENT,) if by_comm else ()))

    def start(self) -> None:
        self.instance.create(KERNEL_BUFFER_KB)
        for target in self.targets:
            self.add(Trigger(target.group, target.event, self.keys, filter=self.conditions.get(target.event, ""),
                             size=min(self.limit, MAX_TABLE_SIZE)))

    def collect(self) -> StackTable:
        """Every stack so far (the kernel's tables are cumulative)."""
        table = StackTable(self.limit)
        for target in self.targets:
            parse_hist_stacks(self.triggers.hist(target.group, target.event), table, self.comm_key, probed(target))
        return table


class UserStackEngine(InstanceReader):
    """Hits per stack counted here, from the stack the kernel prints after each event in our instance."""

    def __init__(self, top: Tracefs, targets: list[Target], kernel_filters: dict[str, str], by_comm: bool,
                 limit: int, user_stacks: bool) -> None:
        super().__init__(top)
        self.targets = targets
        self.kernel_filters = kernel_filters
        self.by_comm = by_comm
        self.user_stacks = user_stacks
        self.table = StackTable(limit)
        self.deepest = 0  # frames of the deepest stack seen: how a program without frame pointers shows
        self._probed = {target.event: probed(target) for target in targets}
        self._user_frames = UserFrames()
        self._at_entry = {target.event for target in targets if target.probe.function_offset == 0}
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
            comm = str(event.args.get(COMM_ARGUMENT, event.comm)).strip('"') if self.by_comm else None
            frames = self._user_stack(event) if self.user_stacks else event.stack
            self.deepest = max(self.deepest, len(frames))
            add_event_stack(self.table, frames, comm, self._probed.get(event.event))

    def _user_stack(self, event: Event) -> list[str]:
        """The user stack named, with the caller of a function probed at its entry put back in (it is
        the return address on top of the stack: the kernel's walk starts at the caller's frame)."""
        frames = [self._user_frames.name(event.pid, frame) for frame in event.stack or ()]
        caller = event.args.get(CALLER_ARGUMENT) if event.event in self._at_entry else None
        if isinstance(caller, int) and frames:
            frames.insert(1, self._user_frames.name(event.pid, f"<{caller:016x}>"))
        return frames

    def collect(self) -> StackTable:
        """Every stack so far; the newest event waits for its stack lines unless a whole read brought none."""
        if self._error:
            raise UserError(self._error)
        with self._lock:
            self._count(self._parser.flush_if_quiet())
            # The ring counts records, and each event is two: it, then its stack.
            lost = ((self.reader.lost if self.reader else 0) + self._unread) // 2
            return replace(self.table, counts=dict(self.table.counts), lost=lost)

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
                 engine: str = "auto") -> None:
        super().__init__(top, targets, filter_text, engine)
        self.by_comm = by_comm
        self.limit = max_stacks()
        self.rates: deque[float] = deque(maxlen=RATE_HISTORY)
        self.sampled = StackTable(self.limit)  # the counts at the previous sample

    def _choose(self) -> Choice:
        refusal = self._plan_filter()
        if refusal:
            raise UserError(f"the kernel cannot apply the filter ({refusal})",
                            "counting stacks takes a filter the kernel can say (fields compared with constants)")
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
            return KernelStackEngine(self.top, self.targets.items, self._conditions(), self.by_comm, self.limit)
        return UserStackEngine(self.top, self.targets.items, self._kernel_filters, self.by_comm, self.limit,
                               self.targets.uprobes)

    def collect(self) -> StackTable:
        with self._lock:
            return self._collect()

    def _collect(self) -> StackTable:
        if not self._running:
            raise RuntimeError("collect() or sample() before start() or after stop()")
        return self._running_engine()[1].collect()

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
        """The stacks as a count keyed by ``stack`` (and ``comm``), most hits first."""
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
                return engine.collect()
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
