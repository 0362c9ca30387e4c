"""Stacks as a key: how often each call path reached a probe, and the ways to print it.

``StackCounts`` maps a stack, outermost caller first (``("entry_SYSCALL_64_after_hwframe+0x63",
..., "vfs_read+0x5")``), to its count: the order a flame graph stacks its frames in. Both engines
fill it: the kernel's hist file (``keys=stacktrace``, ``common_stacktrace`` from 6.4) and the text
stream's ``<stack trace>`` / `` => frame`` lines. Both print innermost first; they are turned
around here, once. The number of distinct stacks kept is bounded (``max_stacks()``): hits of a
stack not seen before the bound was reached are counted in ``StackTable.dropped``.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from kprobe_tui.errors import UserError

StackCounts = dict[tuple[str, ...], int]  # stack (outermost first) -> count

MAX_STACKS_ENV = "KPROBE_TUI_MAX_STACKS"
DEFAULT_MAX_STACKS = 10_000  # a flame graph of 10k distinct stacks still paints smoothly
# "vfs_read+0x5/0x1a0 [ext4]": %pS adds the function's size after the slash; it says nothing about
# the call path and bpftrace leaves it out, so it goes. Module names and bare addresses stay.
_SIZE = re.compile(r"(\+0x[0-9a-f]+)/0x[0-9a-f]+")
_OFFSET = re.compile(r"\+(?:0x[0-9a-f]+|\d+)")
_HITCOUNT = re.compile(r" ?hitcount: +(\d{1,20})(?!\d)")
_NUMBER = re.compile(r"[0-9]{1,20}")  # a key's value as the kernel prints it (unsigned decimal)
_DROPPED = re.compile(r"\s*Dropped: (\d{1,20})\s*$")
# A synthetic event's stack field as a key: its first frame on the key's line ("{ stack.stacktrace    f+0x9/0x370")
_FIELD_STACK = re.compile(r"\{ \w{1,64}\.stacktrace +(\S.*)$")
_LOG2_BUCKET = re.compile(r"~ 2\^(\d{1,3})")  # a .log2 key's value: the bucket's exponent
_FOLDED_UNSAFE = str.maketrans({";": ":", "\n": " ", "\r": " "})  # ";" splits frames in a folded line


def max_stacks() -> int:
    """The most distinct stacks a run keeps: KPROBE_TUI_MAX_STACKS, or the default."""
    text = os.environ.get(MAX_STACKS_ENV, "").strip()
    if not text:
        return DEFAULT_MAX_STACKS
    if not re.fullmatch(r"[0-9]{1,9}", text) or int(text) == 0:  # int() refuses "²" and 4300 digits
        raise UserError(f"{MAX_STACKS_ENV}={text!r} is not a number of stacks",
                        f"set it to a whole number (the default is {DEFAULT_MAX_STACKS}), or unset it")
    return int(text)


# A stack's frames repeat: with the caller's name cached too, 20k user stacks of 3 frames took 0.66 s of CPU
# here instead of 0.83 s.
@functools.lru_cache(maxsize=1 << 14)
def frame_text(frame: str) -> str:
    """A frame as the kernel printed it, without the function's size: ``vfs_read+0x5 [mod]``."""
    return _SIZE.sub(r"\1", frame.strip(), count=1)


def frame_symbol(frame: str) -> str:
    """A frame's function alone (``vfs_read``): what two engines, or two tools, agree on when the
    offsets they print differ in form (bpftrace's ``+5`` against the kernel's ``+0x5``)."""
    return _OFFSET.split(frame.strip(), maxsplit=1)[0].split(" ", 1)[0]


@dataclass
class StackTable:
    """Counts per (stack, comm); ``comm`` is None unless the run is keyed by comm too."""

    limit: int = DEFAULT_MAX_STACKS
    counts: dict[tuple[tuple[str, ...], str | None], int] = field(default_factory=dict)
    dropped: int = 0  # hits of stacks not kept because ``limit`` distinct stacks were kept already
    garbled: int = 0  # entries of the hist file that fit no stack key
    lost: int = 0  # events the user-space engine never read: the ring overflowed, or held them at the end
    unmatched: int = 0  # a latency by stack: returns with no entry on their thread (nested calls' outer ones)
    # A histogram by stack: each kept (stack, comm)'s exact values -> hits (``hist SPEC FIELD --by stack``).
    values: dict[tuple[tuple[str, ...], str | None], Counter] = field(default_factory=dict)
    # A latency by stack in the kernel: each kept (stack, comm)'s log2 bucket -> hits, and the sum of its latencies.
    grouped: dict[tuple[tuple[str, ...], str | None], Counter] = field(default_factory=dict)
    sums: Counter = field(default_factory=Counter)

    def add(self, stack: tuple[str, ...], comm: str | None = None, count: int = 1, value: int | None = None) -> None:
        key = (stack, comm)
        if key in self.counts:
            self.counts[key] += count
        elif len(self.counts) < self.limit:
            self.counts[key] = count
        else:
            self.dropped += count
            return
        if value is not None:
            self.values.setdefault(key, Counter())[value] += count

    def add_grouped(self, stack: tuple[str, ...], comm: str | None, bucket: int, count: int, total: int) -> None:
        """Hits of one log2 bucket and the sum of their values (a kernel table keyed by ``lat1.log2``)."""
        self.add(stack, comm, count)
        key = (stack, comm)
        if key in self.counts:
            self.grouped.setdefault(key, Counter())[bucket] += count
            self.sums[key] += total

    @property
    def capped(self) -> bool:
        return self.dropped > 0

    def capped_message(self) -> str:
        """Why a run that reached its bound stopped, and how to go further."""
        return (f"stopped: {len(self.counts)} distinct stacks, the most a run keeps; {self.dropped} hits of other "
                f"stacks are not shown: raise {MAX_STACKS_ENV} (e.g. {MAX_STACKS_ENV}={2 * self.limit}) or narrow "
                "the count with a filter")

    def since(self, before: StackTable) -> StackTable:
        """What was counted after ``before`` (an earlier copy of the same run's counts): one interval."""
        counts = {key: count - before.counts.get(key, 0) for key, count in self.counts.items()}
        values = {key: counted - before.values.get(key, Counter()) for key, counted in self.values.items()}
        grouped = {key: counted - before.grouped.get(key, Counter()) for key, counted in self.grouped.items()}
        return replace(self, counts={key: count for key, count in counts.items() if count > 0},
                       grouped={key: counted for key, counted in grouped.items() if counted},
                       sums=self.sums - before.sums,
                       dropped=max(0, self.dropped - before.dropped), garbled=max(0, self.garbled - before.garbled),
                       lost=max(0, self.lost - before.lost), unmatched=max(0, self.unmatched - before.unmatched),
                       values={key: counted for key, counted in values.items() if counted})

    def top(self, count: int) -> StackTable:
        """Only the ``count`` stacks with the most hits."""
        kept = dict(sorted(self.counts.items(), key=lambda item: item[1], reverse=True)[:count])
        return replace(self, counts=kept, values={key: counted for key, counted in self.values.items() if key in kept},
                       grouped={key: counted for key, counted in self.grouped.items() if key in kept},
                       sums=Counter({key: total for key, total in self.sums.items() if key in kept}))

    def renamed(self, name: Callable[[str], str]) -> StackTable:
        """The same counts with ``name`` applied to every frame and comm (escaping them for a terminal)."""
        return self.restacked(lambda stack: tuple(map(name, stack)), name)

    def restacked(self, stack_name: Callable[[tuple[str, ...]], tuple[str, ...]],
                  comm_name: Callable[[str], str] = str) -> StackTable:
        """The same counts with each stack named by ``stack_name`` (which knows a frame's place in it)."""
        renamed = replace(self, counts={}, values={}, grouped={}, sums=Counter())
        for (stack, comm), count in self.counts.items():
            key = (stack_name(stack), None if comm is None else comm_name(comm))
            renamed.counts[key] = renamed.counts.get(key, 0) + count
            if (stack, comm) in self.values:
                renamed.values.setdefault(key, Counter()).update(self.values[(stack, comm)])
            if (stack, comm) in self.grouped:
                renamed.grouped.setdefault(key, Counter()).update(self.grouped[(stack, comm)])
                renamed.sums[key] += self.sums[(stack, comm)]
        return renamed

    def stacks(self) -> StackCounts:
        """Counts per stack; with comms, the comm is the outermost frame (how bcc's stackcount -P
        folds it): a flame graph then splits by program first."""
        out: StackCounts = {}
        for (stack, comm), count in self.counts.items():
            key = stack if comm is None else (comm, *stack)
            out[key] = out.get(key, 0) + count
        return out

    def by_symbol(self) -> StackCounts:
        """Counts per stack of function names (see ``frame_symbol``)."""
        out: StackCounts = {}
        for stack, count in self.stacks().items():
            key = tuple(frame_symbol(frame) for frame in stack)
            out[key] = out.get(key, 0) + count
        return out


def parse_hist_stacks(text: str, table: StackTable, comm_key: str | None = None, probed: str | None = None,
                      value_key: str | None = None, value_of: Callable[[int], int] = int) -> None:
    """Add the entries of a hist file keyed by the stack (then by the string field ``comm_key``, then by the
    number ``value_key``, whose printed unsigned value ``value_of`` reads as the field's own).

        { common_stacktrace:
                 ksys_read+0x70/0xd0
                 do_syscall_64+0x3a/0x90
        , kptui_comm: dd                                                , n:         17} hitcount:          6

    The kernel prints at most 16 frames, innermost first, each indented by nine spaces; the key ends
    with ``}`` (after a space or not: kernels differ). A comm holding a newline ends its entry early:
    the entry is counted in ``garbled``, never under a forged stack. ``probed``: see ``trim``."""
    for frames, head, number, hits, _ in _stack_entries(text, table, value_key):
        value = value_of(int(number)) if number is not None else None
        try:
            comm = _after_stack(head, comm_key)
        except ValueError:
            table.garbled += 1
            continue
        table.add(trim(tuple(reversed(frames)), probed), comm, hits, value)


def parse_hist_stack_buckets(text: str, table: StackTable, comm_key: str | None, probed: str | None,
                             bucket_key: str, sum_name: str) -> None:
    """Add the entries of a synthetic event's table keyed by its stack field (then ``comm_key``, then the
    ``.log2`` key ``bucket_key``) with the sum ``sum_name`` beside the hitcount:

        { stack.stacktrace         vfs_read+0x9/0x370
                 ksys_read+0xbb/0xf0
        , lat1: ~ 2^15} hitcount:          3  lat:      66431
    """
    for frames, head, bucket, hits, after in _stack_entries(text, table, bucket_key, _LOG2_BUCKET):
        total = re.search(rf"\b{re.escape(sum_name)}: +(\d{{1,20}})(?!\d)", after)
        try:
            comm = _after_stack(head, comm_key)
            if total is None or bucket is None:
                raise ValueError(after)
        except ValueError:
            table.garbled += 1
            continue
        table.add_grouped(trim(tuple(reversed(frames)), probed), comm, int(bucket), hits, int(total[1]))


def _stack_entries(text: str, table: StackTable, last_key: str | None = None, last_value: re.Pattern = _NUMBER):
    """(frames innermost first, what follows them up to the hitcount, the value of ``last_key``, hits, the rest
    of the line) per entry of a hist file keyed by a stack; with ``last_key``, what follows stops before that
    key, whose value is what ``last_value`` matches (its first group, else all of it; None without a
    ``last_key``). A table's dropped hits go to ``table.dropped``, an entry that fits no stack to ``table.garbled``."""
    frames: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("{ ") and line.rstrip().endswith("stacktrace:"):
            frames = []
        elif field_stack := _FIELD_STACK.match(line):
            frames = [frame_text(field_stack[1])]
        elif frames is None:
            if dropped := _DROPPED.match(line):
                table.dropped += int(dropped[1])
        elif line.startswith("         ") and line.strip():
            frames.append(frame_text(line))
        else:
            hit = _HITCOUNT.search(line)
            try:
                if hit is None:
                    raise ValueError(line)
                head, value = line[:hit.start()].rstrip().removesuffix("}").rstrip(" "), None
                if last_key is not None:  # the last key: a comm before it holding its name cannot shift it
                    head, separator, shown = head.rpartition(f", {last_key}: ")
                    found = last_value.fullmatch(shown.strip())
                    if not separator or found is None:
                        raise ValueError(line)
                    head, value = head.rstrip(" "), found[1] if found.groups() else found[0]
                yield frames, head, value, int(hit[1]), line[hit.end():]
            except ValueError:
                table.garbled += 1
            frames = None


def trim(stack: tuple[str, ...], probed: str | None) -> tuple[str, ...]:
    """The stack up to the probed function's frame: a hist trigger's stack of a kprobe hit goes on into
    the probe's own machinery (``kprobe_ftrace_handler+0x108``, the ftrace trampoline's bare address:
    both guests), which bpftrace's ``kstack`` and the text stream's leave out."""
    if probed:
        for index in range(len(stack) - 1, -1, -1):
            if frame_symbol(stack[index]) == probed:
                return stack[:index + 1]
    return stack


def _after_stack(head: str, comm_key: str | None) -> str | None:
    """The comm in what follows the frames (``, kptui_comm: dd``, the closing brace taken off); None without
    ``comm_key``; ValueError when the text fits neither."""
    prefix = f", {comm_key}: "
    if comm_key is None and not head:
        return None
    if comm_key is None or not head.startswith(prefix):
        raise ValueError(head)
    return head[len(prefix):]


def add_event_stack(table: StackTable, frames: Iterable[str] | None, comm: str | None = None,
                    probed: str | None = None, value: int | None = None) -> None:
    """Count one event's stack as the text stream gives it (innermost first, `` => `` taken off)."""
    if frames is not None:
        table.add(trim(tuple(frame_text(frame) for frame in reversed(list(frames))), probed), comm, value=value)


def _ordered(table: StackTable) -> list[tuple[tuple[str, ...], str | None, int]]:
    """Entries smallest count first, as bpftrace prints a map (the biggest ends next to the prompt)."""
    return sorted(((stack, comm, count) for (stack, comm), count in table.counts.items()),
                  key=lambda entry: (entry[2], entry[1] or "", entry[0]))


def format_bpftrace(table: StackTable, name: str = "@") -> str:
    """bpftrace's layout of ``@[kstack] = count()`` (or ``@[kstack, comm]``): innermost frame first, four
    spaces in (bpftrace 0.17 in the guests)."""
    lines = []
    for stack, comm, count in _ordered(table):
        lines.append(f"{name}[")
        lines.extend(f"    {frame}" for frame in reversed(stack))
        lines.append(f"]: {count}" if comm is None else f", {comm}]: {count}")
    return "\n".join(lines) + ("\n" if lines else "")


def format_folded(table: StackTable) -> str:
    """One ``outermost;...;innermost COUNT`` line a stack: what flamegraph.pl, inferno and speedscope read."""
    lines = []
    for stack, count in sorted(table.stacks().items()):
        frames = ";".join(frame.translate(_FOLDED_UNSAFE) for frame in stack)
        lines.append(f"{frames} {count}")
    return "\n".join(lines) + ("\n" if lines else "")


def format_json(table: StackTable, **extra: object) -> str:
    """One JSON object: the stacks (outermost frame first), most hits first, and what the bound dropped."""
    stacks = [{"stack": list(stack), "count": count} | ({} if comm is None else {"comm": comm})
              for stack, comm, count in reversed(_ordered(table))]
    return json.dumps({"stacks": stacks, "dropped": table.dropped, "lost": table.lost, "max_stacks": table.limit, **extra})
