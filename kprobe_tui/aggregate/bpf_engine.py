"""The BPF engine: counts, histograms and latency by small BPF programs of our own on our probes.

The same probes as every engine's (made in tracefs, run-scoped), each with a program assembled here
(``kernel.bpf``) that keys the hit and adds one to a hash map: no event is recorded, copied or
parsed, and no trigger runs. One map for every aggregation, keyed by (comm, thread id, probe,
value), each part zero when the aggregation does not key by it; a histogram's and a latency's values
are kept exact (a latency in the run's unit), so the buckets, minimum and maximum are computed here
as for the other engines. User space walks the map once per ``collect()``.

What it cannot say goes to the hist-trigger engine (see ``unfit``): a filter, a captured value that
is not a register or one load from a register's address, a string.
"""

from __future__ import annotations

import os
import re
import struct
from collections import Counter

from kprobe_tui.aggregate.model import Aggregation
from kprobe_tui.aggregate.tally import Tally
from kprobe_tui.aggregate.targets import Target
from kprobe_tui.errors import UserError
from kprobe_tui.kernel import bpf, lifetime
from kprobe_tui.kernel.bpf import Assembler, alu, call, exit_, load, load_map, store, store_imm
from kprobe_tui.kernel.btf import Btf
from kprobe_tui.kernel.perfevent import read_event_id
from kprobe_tui.kernel.tracefs import Tracefs
from kprobe_tui.probes.rawfetch import ARG_REGISTERS
from kprobe_tui.stream.filterexpr import field_layout

# Distinct keys kept; more are counted as dropped, as a full hist table's are. A key is 32 bytes, its
# value 8, and the kernel preallocates every entry of a hash map (with its overhead, a few MB).
MAX_KEYS = 32768
MAX_THREADS = 16384  # latency: calls in flight, one entry each (a thread is in one call of the function at once)
# Where each register is in x86-64's struct pt_regs, as the kernel's fetch-args name them.
PT_REGS = {"r15": 0, "r14": 8, "r13": 16, "r12": 24, "bp": 32, "bx": 40, "r11": 48, "r10": 56, "r9": 64, "r8": 72,
           "ax": 80, "cx": 88, "dx": 96, "si": 104, "di": 112, "ip": 128, "sp": 152}
_FETCH = re.compile(r"^(?:%(?P<reg>\w+)|\$retval|\$arg(?P<arg>[1-6])|(?P<off>[+-]?\d+)\(%(?P<base>\w+)\)|(?P<name>[A-Za-z_]\w*))$")
PROBE_READ_USER, PROBE_READ_KERNEL = 112, 113
# The stack: the map key (comm[16], tid u32, probe u32, value u64), then scratch words below it.
KEY, TID, PROBE, VALUE, SCRATCH, ONE, START = -32, -16, -12, -8, -40, -48, -56
_KEY = struct.Struct("<16sIIQ")
CTX, PID_TGID, HELD = 6, 7, 8  # registers kept across helper calls
DROPPED, UNMATCHED = 0, 1  # the slots of the misses map


def unfit(aggregation: Aggregation, targets: list[Target], arguments: dict[str, str], filter_text: str) -> str | None:
    """Why the BPF engine cannot run this aggregation, or None when it can."""
    if why := bpf.supported():
        return why
    if filter_text:
        return "the BPF engine applies no filter"
    if any(not key.is_header for key in aggregation.keys):
        return "the BPF engine keys by comm, pid and probe only"
    if aggregation.kind == "hist":
        for target in targets:
            if _value_source(target, arguments[aggregation.histogram_value.name]) is None:
                return f"the BPF engine reads a value from a register or one load, not {target.label}'s"
    return None


def _value_source(target: Target, argument: str) -> tuple[str, int] | None:
    """Where a captured value is: (register, -1) for the register itself, (register, offset) for one load from
    the register's address; None where it is neither (its size and sign come from the event's format)."""
    found = next((arg for arg in target.probe.args if arg.name == argument), None)
    fetch = _FETCH.match(found.fetch) if found is not None else None
    if fetch is None:
        return None
    if fetch["off"] is not None:
        register, offset = fetch["base"], int(fetch["off"])
    elif fetch.group(0) == "$retval":
        register, offset = "ax", -1
    elif fetch["arg"] or fetch["name"]:  # a parameter at entry: its calling-convention register
        index = int(fetch["arg"]) - 1 if fetch["arg"] else _parameter(target, fetch["name"])
        if target.probe.spec.is_return or index is None or index >= len(ARG_REGISTERS):
            return None
        register, offset = ARG_REGISTERS[index], -1
    else:
        register, offset = fetch["reg"], -1
    return (register, offset) if register in PT_REGS else None


def _parameter(target: Target, name: str) -> int | None:
    """The position of a kernel function's parameter the kernel names from BTF (6.5 and later take names)."""
    function = target.probe.function
    if target.probe.spec.is_uprobe or function is None:
        return None
    try:
        names = [param.name for param in Btf.shared().params(function)]
    except (UserError, OSError):
        return None
    return names.index(name) if name in names else None


class BpfEngine:
    name = "kernel"
    method = "bpf"

    def __init__(self, top: Tracefs, aggregation: Aggregation, targets: list[Target], arguments: dict[str, str]) -> None:
        self.top = top
        self.aggregation = aggregation
        self.targets = targets
        self.arguments = arguments
        self._maps: list[bpf.Map] = []
        self._programs: list[bpf.Program] = []
        self._attached: list[int] = []
        self._seen: Counter = Counter()  # key bytes -> hits counted so far
        self._misses_seen = [0, 0]  # dropped, unmatched
        self._counts: bpf.Map | None = None
        self._misses: bpf.Map | None = None  # per CPU: hits a full map could not keep, returns with no entry
        self._undo: int | None = None
        # a histogram's value per probe (its index is in every key): (bytes, signed), as the event's format says
        self._layouts: list[tuple[int, bool]] = []

    def start(self) -> None:
        """Make the maps, load a program per probe and attach it; on a refusal everything made is closed.
        Registered with the run's undo, which runs it before the probes go (a probe with a program attached
        cannot be removed: EBUSY) whatever ends the run: exit, exception, SIGTERM/SIGHUP/SIGINT."""
        self._undo = lifetime.undo.push("BPF programs", self._close)
        try:
            self._counts = self._map(bpf.HASH, _KEY.size, 8, MAX_KEYS, "kptui_counts")
            self._misses = self._map(bpf.PERCPU_ARRAY, 4, 8, 2, "kptui_misses")
            if self.aggregation.kind == "latency":
                starts = self._map(bpf.HASH, 8, 8, MAX_THREADS, "kptui_starts")
                for target in self.targets:
                    code = self._entry(starts) if target.role == "entry" else self._return(starts)
                    self._attach(target, code)
            else:
                for index, target in enumerate(self.targets):
                    if self.aggregation.kind == "hist":
                        value = self.arguments[self.aggregation.histogram_value.name]
                        layout = field_layout(self.top.read(f"events/{target.group}/{target.event}/format"))
                        self._layouts.append(layout.get(value, (8, False)))
                    self._attach(target, self._hit(index, target))
        except BaseException:
            self.stop()
            raise

    def _map(self, kind: int, key_size: int, value_size: int, entries: int, name: str) -> bpf.Map:
        made = bpf.Map(kind, key_size, value_size, entries, name)
        self._maps.append(made)
        return made

    def _attach(self, target: Target, code: Assembler) -> None:
        program = bpf.Program(code.assemble(), f"kptui_{target.role}")
        self._programs.append(program)
        event_dir = self.top.path(f"events/{target.group}/{target.event}")
        self._attached.append(bpf.attach(program, read_event_id(event_dir)))

    # -- the programs ------------------------------------------------------------------------------

    def _begin(self, code: Assembler) -> None:
        """Keep the context and the thread's ids; leave at once on a thread of ours (the golden rule)."""
        code(alu("=", CTX, 1, register=True), call(bpf.GET_CURRENT_PID_TGID), alu("=", PID_TGID, 0, register=True),
             alu("=", 1, 0, register=True), alu(">>", 1, 32))
        code.jump("==", 1, os.getpid(), "out")

    def _hit(self, index: int, target: Target) -> Assembler:
        code = Assembler()
        self._begin(code)
        if self.aggregation.kind == "hist":
            self._read_value(code, target, index)
        self._count(code, probe=index)
        return code

    def _entry(self, starts: bpf.Map) -> Assembler:
        code = Assembler()
        self._begin(code)
        code(store(10, SCRATCH, PID_TGID), call(bpf.KTIME_GET_NS), store(10, START, 0), *load_map(1, starts.fd),
             alu("=", 2, 10, register=True), alu("+", 2, SCRATCH), alu("=", 3, 10, register=True), alu("+", 3, START),
             alu("=", 4, bpf.ANY), call(bpf.MAP_UPDATE_ELEM))
        code.label("out")
        code(alu("=", 0, 0), exit_())
        return code

    def _return(self, starts: bpf.Map) -> Assembler:
        """The time since this thread's entry, in the run's unit, as the value; the entry's mark removed."""
        code = Assembler()
        self._begin(code)
        code(store(10, SCRATCH, PID_TGID), *load_map(1, starts.fd), alu("=", 2, 10, register=True),
             alu("+", 2, SCRATCH), call(bpf.MAP_LOOKUP_ELEM))
        code.jump("==", 0, 0, "unmatched")  # a return whose entry we did not see (begun before the start)
        code(load(HELD, 0, 0), call(bpf.KTIME_GET_NS), alu("-", 0, HELD, register=True),
             alu("=", HELD, 0, register=True), *load_map(1, starts.fd), alu("=", 2, 10, register=True),
             alu("+", 2, SCRATCH), call(bpf.MAP_DELETE_ELEM))
        if self.aggregation.unit_ns > 1:
            code(alu("/", HELD, self.aggregation.unit_ns))
        self._count(code, probe=0, value=True)
        code.label("unmatched")
        self._miss(code, UNMATCHED)
        code(alu("=", 0, 0), exit_())
        return code

    def _miss(self, code: Assembler, slot: int) -> None:
        """Add one to a per-CPU miss counter (no other CPU writes that slot)."""
        assert self._misses is not None
        code(store_imm(10, SCRATCH, slot, size=4), *load_map(1, self._misses.fd), alu("=", 2, 10, register=True),
             alu("+", 2, SCRATCH), call(bpf.MAP_LOOKUP_ELEM))
        code.jump("==", 0, 0, "out")
        code(load(1, 0, 0), alu("+", 1, 1), store(0, 0, 1))

    def _read_value(self, code: Assembler, target: Target, index: int) -> None:
        """The captured value into HELD, as the event's format lays it out (sign-extended where signed)."""
        found = _value_source(target, self.arguments[self.aggregation.histogram_value.name])
        assert found is not None, "unfit() refuses the values the engine cannot read"
        (register, offset), (size, signed) = found, self._layouts[index]
        if offset < 0:
            code(load(HELD, CTX, PT_REGS[register]))
        else:  # one load from the register's address, through the helper (the address may fault)
            code(store_imm(10, SCRATCH, 0), alu("=", 1, 10, register=True), alu("+", 1, SCRATCH), alu("=", 2, size),
                 load(3, CTX, PT_REGS[register]), alu("+", 3, offset),
                 call(PROBE_READ_USER if target.probe.spec.is_uprobe else PROBE_READ_KERNEL), load(HELD, 10, SCRATCH))
        if size < 8:
            shift = 64 - size * 8
            code(alu("<<", HELD, shift), alu("s>>" if signed else ">>", HELD, shift))

    def _count(self, code: Assembler, probe: int, value: bool = False) -> None:
        """Build the key from the aggregation's parts and add one to its count; ends the program."""
        keys = {key.name for key in self.aggregation.keys}
        for offset in range(KEY, 0, 8):
            code(store_imm(10, offset, 0))
        if "comm" in keys:
            code(alu("=", 1, 10, register=True), alu("+", 1, KEY), alu("=", 2, 16), call(bpf.GET_CURRENT_COMM))
        if "pid" in keys:
            code(store(10, TID, PID_TGID, size=4))
        if "probe" in keys or self.aggregation.kind == "hist":
            code(store_imm(10, PROBE, probe, size=4))
        if value or self.aggregation.kind == "hist":
            code(store(10, VALUE, HELD))
        assert self._counts is not None
        lookup = [*load_map(1, self._counts.fd), alu("=", 2, 10, register=True), alu("+", 2, KEY),
                  call(bpf.MAP_LOOKUP_ELEM)]
        code(*lookup)
        code.jump("!=", 0, 0, "add")
        code(store_imm(10, ONE, 1), *load_map(1, self._counts.fd), alu("=", 2, 10, register=True), alu("+", 2, KEY),
             alu("=", 3, 10, register=True), alu("+", 3, ONE), alu("=", 4, bpf.NOEXIST), call(bpf.MAP_UPDATE_ELEM))
        code.jump("==", 0, 0, "out")
        code(*lookup)  # another CPU made the key first: add to it; else the map is full
        code.jump("!=", 0, 0, "add")
        self._miss(code, DROPPED)
        code.goto("out")
        code.label("add")
        code(alu("=", 1, 1), bpf.atomic_add(0, 0, 1))
        code.label("out")
        code(alu("=", 0, 0), exit_())

    # -- reading -----------------------------------------------------------------------------------

    def collect(self) -> Tally:
        assert self._counts is not None and self._misses is not None, "collect() after start()"
        tally = Tally()
        values: dict[tuple, Counter] = {}
        for raw in self._counts.keys():
            found = self._counts.lookup(raw)
            new = (found[0] if found else 0) - self._seen[raw]
            if new <= 0:
                continue
            self._seen[raw] += new
            comm, tid, probe, value = _KEY.unpack(raw)
            key = tuple(self._part(name, comm, tid, probe) for name in (k.name for k in self.aggregation.keys))
            if self.aggregation.has_value:
                values.setdefault(key, Counter())[self._signed(value, probe)] += new
            else:
                tally.count(key, new)
        for key, counted in values.items():
            tally.cell(key).add_values(counted)
        misses = [(self._misses.lookup(struct.pack("<I", slot)) or [0])[0] for slot in (DROPPED, UNMATCHED)]
        tally.dropped, tally.unmatched = (now - before for now, before in zip(misses, self._misses_seen))
        self._misses_seen = misses
        return tally

    def _part(self, name: str, comm: bytes, tid: int, probe: int):
        if name == "comm":
            return comm.split(b"\0", 1)[0].decode("utf-8", "replace")
        if name == "pid":
            return tid
        return self.targets[probe].label

    def _signed(self, value: int, probe: int) -> int:
        """A histogram's value as its event's format says: the map holds 64 bits, sign-extended where signed."""
        return value - (1 << 64) if value >= 1 << 63 and self._layouts[probe][1] else value

    def drain(self) -> None:
        """Nothing is in flight: every hit is in the map when its program returns."""

    def stop(self) -> None:
        if self._undo is not None:
            lifetime.undo.run(self._undo)
            self._undo = None

    def _close(self) -> None:
        for fd in self._attached:
            os.close(fd)
        for program in self._programs:
            program.close()
        for made in self._maps:
            made.close()
        self._attached, self._programs, self._maps = [], [], []
