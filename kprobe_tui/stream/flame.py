"""The layout of a flame graph drawn as an icicle (the root at the top): what ``tui/widgets/flame.py`` paints.

Counted stacks (``StackCounts``: frames outermost first) become frames: one per call path, ``all`` at
depth 0, each a span ``[start, end)`` of the total count, its children inside it merged by name and
sorted by name, self time after them (flamegraph.pl's order: it sorts the folded lines, so a path
comes before the paths that extend it). The layout is made once per data set by one pass over the
sorted stacks; then ``cells`` says which frames fill which columns of a row for a width and a zoom
(the zoomed frame takes the full width, its ancestors above it too), in ``O(width log frames)`` per
row: a frame narrower than a column is skipped with a bisection, with everything it would cover.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from itertools import accumulate, chain, compress
from itertools import count as counter
from operator import ne
from typing import NamedTuple

from kprobe_tui.errors import UserError
from kprobe_tui.stream.stacks import StackCounts

ROOT = 0  # the frame index of "all"
ROOT_NAME = "all"


class Cell(NamedTuple):
    """A frame drawn over columns ``[first, end)`` of a row."""

    first: int
    end: int
    frame: int


@dataclass(frozen=True)
class Zoom:
    """What a row shows: ``frame`` over the full width, from ``start`` to ``end`` of the total count."""

    frame: int
    depth: int
    start: int
    end: int


class FlameLayout:
    """Frames numbered row by row (``all`` is 0, then depth 1 left to right, ...): their spans as two lists,
    their names and callers found when asked (a 10k-stack graph has 20k-150k frames, and a screen shows a
    few hundred: objects would cost 5x the memory, and names and callers as lists twice the time)."""

    def __init__(self, stacks: StackCounts) -> None:
        self.starts: list[int] = [0]
        self.ends: list[int] = []
        self.offsets: list[int] = []  # the first frame of each row, and one past the last row
        self._order: list[tuple[str, ...]] = []  # the stacks, sorted
        self._stack_of: list[int] = []  # per frame: the stack (in _order) it begins at
        self._lay_out(stacks)
        self._lowered: list[str] | None = None

    def _lay_out(self, stacks: StackCounts) -> None:
        """flamegraph.pl's ``flow``: along the sorted stacks, the frames a stack does not share with the one
        before it end where it begins (the running total), and its own begin there. The pass notes only
        at which stack each frame begins and ends; the spans are made from that by C loops (``map``).
        10k stacks of 16 frames on a loaded 2-core VM, in ms of CPU: 48-63 for 121k frames, 23 for 20k,
        against 120 and 31 with every frame's name and caller in lists too."""
        self._order = order = sorted([stack for stack, count in stacks.items() if count > 0])
        deepest = max(map(len, order), default=0)
        begins: list[list[int]] = [[-1]] + [[] for _ in range(deepest)]  # per depth: the stacks its frames begin at
        closes: list[list[int]] = [[] for _ in range(deepest + 1)]  # ... and end at (frames of a row end in order)
        previous: tuple[str, ...] = ()
        for index, stack in enumerate(order):
            # how many frames it shares with the stack before: where the first differs, found in C
            shared = next(compress(counter(), map(ne, stack, previous)), min(len(stack), len(previous)))
            for depth in range(shared + 1, len(previous) + 1):
                closes[depth].append(index)
            for depth in range(shared + 1, len(stack) + 1):
                begins[depth].append(index)
            previous = stack
        for depth in range(1, len(previous) + 1):
            closes[depth].append(len(order))
        at = list(accumulate(map(stacks.__getitem__, order), initial=0))  # where each stack begins; then the total
        self.ends.append(at[-1])
        for depth in range(1, deepest + 1):
            self.starts += map(at.__getitem__, begins[depth])
            self.ends += map(at.__getitem__, closes[depth])
        self.offsets = list(accumulate(map(len, begins), initial=0))
        self._stack_of = list(chain.from_iterable(begins))

    def name(self, frame: int) -> str:
        if frame == ROOT:
            return ROOT_NAME
        return self._order[self._stack_of[frame]][self.depth_of(frame) - 1]

    def parent(self, frame: int) -> int:
        """The caller's frame (-1 for ``all``): the frame of the row above that starts last at or before this one."""
        depth = self.depth_of(frame)
        if depth == 0:
            return -1
        return bisect_right(self.starts, self.starts[frame], self.offsets[depth - 1], self.offsets[depth]) - 1

    @property
    def total(self) -> int:
        return self.ends[ROOT]

    @property
    def depth(self) -> int:
        """Rows: ``all`` and one per stack depth."""
        return len(self.offsets) - 1

    def row(self, depth: int) -> range:
        """The frames of row ``depth``, left to right."""
        return range(self.offsets[depth], self.offsets[depth + 1])

    def depth_of(self, frame: int) -> int:
        return bisect_right(self.offsets, frame) - 1

    def count(self, frame: int) -> int:
        return self.ends[frame] - self.starts[frame]

    def share(self, frame: int, of: int = ROOT) -> float:
        """``frame``'s part of ``of``'s count (0..1)."""
        whole = self.count(of)
        return self.count(frame) / whole if whole else 0.0

    def ancestors(self, frame: int) -> list[int]:
        """``all`` first, down to ``frame`` itself."""
        line = []
        while frame >= 0:
            line.append(frame)
            frame = self.parent(frame)
        return line[::-1]

    def children(self, frame: int) -> range:
        depth = self.depth_of(frame) + 1
        if depth >= self.depth:
            return range(0)
        first = bisect_left(self.starts, self.starts[frame], self.offsets[depth], self.offsets[depth + 1])
        return range(first, bisect_left(self.starts, self.ends[frame], first, self.offsets[depth + 1]))

    def zoom(self, frame: int = ROOT) -> Zoom:
        return Zoom(frame, self.depth_of(frame), self.starts[frame], self.ends[frame])

    def cells(self, depth: int, width: int, zoom: Zoom) -> list[Cell]:
        """The frames drawn on row ``depth`` at ``width`` columns: above the zoomed frame its ancestor
        over the full width, below it its descendants scaled to it. A frame's edges are rounded to the
        nearest column, so neighbours tile without gaps; one that rounds to no column is not drawn."""
        if width <= 0 or not 0 <= depth < self.depth or zoom.end <= zoom.start:
            return []
        if depth <= zoom.depth:
            frame = zoom.frame
            for _ in range(zoom.depth - depth):
                frame = self.parent(frame)
            return [Cell(0, width, frame)]
        span = zoom.end - zoom.start
        starts, ends = self.starts, self.ends
        cells: list[Cell] = []
        frame = bisect_left(starts, zoom.start, self.offsets[depth], self.offsets[depth + 1])
        last = bisect_left(starts, zoom.end, frame, self.offsets[depth + 1])
        while frame < last:
            first = ((starts[frame] - zoom.start) * 2 * width + span) // (2 * span)  # round(x * width / span)
            end = ((ends[frame] - zoom.start) * 2 * width + span) // (2 * span)
            if end > first:
                cells.append(Cell(first, end, frame))
                frame += 1
            else:  # skip what rounds to this column too: only the one frame across its right edge may show
                edge = zoom.start - (-(2 * first + 1) * span // (2 * width))  # the first count past the edge
                frame = max(frame + 1, bisect_left(starts, edge, frame, last) - 1)
        return cells

    def matches(self, text: str) -> set[int]:
        """The frames whose name holds ``text`` (any case; ``all`` is no frame of the stacks): none for an empty text."""
        if not text:
            return set()
        if self._lowered is None:  # every name, row by row: made at the first search
            order, stack_of = self._order, self._stack_of
            self._lowered = [ROOT_NAME]
            for depth in range(1, self.depth):
                self._lowered += [order[stack_of[frame]][depth - 1].lower() for frame in self.row(depth)]
        needle = text.lower()
        return {frame for frame, name in enumerate(self._lowered) if needle in name and frame != ROOT}

    def matched_count(self, frames: set[int]) -> int:
        """The count under ``frames``, each counted once (a match inside a match adds nothing). Spans nest or
        are apart, so by start (a caller before its callee: frames are numbered row by row) a frame inside
        one counted already starts before that one's end."""
        total, counted_to = 0, 0
        for frame in sorted(frames, key=lambda frame: (self.starts[frame], frame)):
            if self.starts[frame] >= counted_to:
                total += self.count(frame)
                counted_to = self.ends[frame]
        return total


def parse_folded(text: str, origin: str) -> StackCounts:
    """``a;b;c 12`` lines (flamegraph.pl's input, what ``count --by stack --folded`` writes) as counted
    stacks; a line repeated adds up. The tests and pictures draw a guest's stacks kept this way. Its place
    is beside ``stacks.format_folded``, which writes them: it moves there when that module reads them."""
    stacks: StackCounts = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        frames, _, count = line.rstrip().rpartition(" ")
        if not frames or not (count.isascii() and count.isdigit() and len(count) <= 19):  # int() refuses 4301 digits
            raise UserError(f"{origin}:{number}: not a folded stack line (frames;separated;by;semicolons COUNT)",
                            "give the output of --folded, flamegraph.pl's stackcollapse or bpftrace folded by one")
        stack = tuple(frames.split(";"))
        stacks[stack] = stacks.get(stack, 0) + int(count)
    return stacks
