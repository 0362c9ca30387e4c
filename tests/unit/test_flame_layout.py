"""The flame graph's layout (stream/flame.py): spans merged by name per parent, cells at a width and zoom."""

from __future__ import annotations

import random

import pytest

from kprobe_tui.errors import UserError
from kprobe_tui.stream.flame import ROOT, Cell, FlameLayout, parse_folded
from kprobe_tui.stream.stacks import StackTable, format_folded

STACKS = {("a", "b", "c"): 3, ("a", "b"): 1, ("a", "d"): 4, ("e",): 2, ("a", "b", "c", "x"): 2}


def spans(layout: FlameLayout) -> dict[tuple[str, ...], tuple[int, int]]:
    """Every frame by its path of names: (start, end)."""
    return {tuple(layout.name(frame) for frame in layout.ancestors(frame)[1:]): (layout.starts[frame], layout.ends[frame])
            for frame in range(len(layout.starts))}


def test_frames_are_merged_by_name_per_parent_sorted_by_name_self_time_first():
    layout = FlameLayout(STACKS)
    assert layout.total == 12
    assert spans(layout) == {(): (0, 12), ("a",): (0, 10), ("a", "b"): (0, 6), ("a", "b", "c"): (1, 6),
                             ("a", "b", "c", "x"): (4, 6), ("a", "d"): (6, 10), ("e",): (10, 12)}
    assert layout.depth == 5
    assert [layout.name(child) for child in layout.children(ROOT)] == ["a", "e"]


def test_same_name_under_different_parents_are_different_frames():
    layout = FlameLayout({("a", "x"): 1, ("b", "x"): 1})
    assert [layout.name(frame) for frame in layout.row(2)] == ["x", "x"]


def test_zero_and_empty_stacks():
    layout = FlameLayout({("a",): 0, (): 5})
    assert layout.total == 5 and layout.depth == 1
    assert FlameLayout({}).cells(0, 80, FlameLayout({}).zoom()) == []


def test_cells_at_the_root_and_zoomed():
    layout = FlameLayout(STACKS)
    root = layout.zoom()
    assert layout.cells(0, 12, root) == [Cell(0, 12, ROOT)]
    assert [(cell.first, cell.end, layout.name(cell.frame)) for cell in layout.cells(1, 12, root)] == [(0, 10, "a"), (10, 12, "e")]
    b = next(frame for frame in layout.row(2) if layout.name(frame) == "b")
    zoom = layout.zoom(b)
    # the ancestors take the full width above the zoomed frame; what is below scales to it
    assert [layout.name(cell.frame) for depth in range(3) for cell in layout.cells(depth, 12, zoom)] == ["all", "a", "b"]
    assert [(cell.first, cell.end, layout.name(cell.frame)) for cell in layout.cells(3, 12, zoom)] == [(2, 12, "c")]
    assert [(cell.first, cell.end) for cell in layout.cells(4, 12, zoom)] == [(8, 12)]


def brute_cells(layout: FlameLayout, depth: int, width: int, frame: int) -> list[Cell]:
    """Every frame of the row inside the zoomed one, rounded to columns: what ``cells`` skips to."""
    start, end = layout.starts[frame], layout.ends[frame]
    span = end - start
    cells = []
    for other in layout.row(depth):
        if start <= layout.starts[other] and layout.ends[other] <= end and layout.starts[other] < end:
            first = int((layout.starts[other] - start) * width / span + 0.5)
            last = int((layout.ends[other] - start) * width / span + 0.5)
            if last > first:
                cells.append(Cell(first, last, other))
    return cells


def random_stacks(seed: int) -> dict[tuple[str, ...], int]:
    rng = random.Random(seed)
    return {tuple(rng.choice("fghi") for _ in range(rng.randint(0, 6))): rng.choice([0, 1, 1, 1, 2, 50, 400])
            for _ in range(600)}


def test_each_frame_counts_the_stacks_through_it_and_its_callees_are_in_name_order():
    stacks = random_stacks(27)
    layout = FlameLayout(stacks)
    paths = spans(layout)
    assert len(paths) == len(layout.starts)
    for path, (start, end) in paths.items():
        assert end - start == sum(count for stack, count in stacks.items() if stack[:len(path)] == path), path
    for frame in range(len(layout.starts)):
        callees = list(layout.children(frame))
        assert [layout.name(c) for c in callees] == sorted(layout.name(c) for c in callees)
        assert all(layout.parent(c) == frame for c in callees)
        # self time first, then the callees back to back up to the frame's end
        assert [layout.starts[c] for c in callees[1:]] == [layout.ends[c] for c in callees[:-1]]
        assert not callees or layout.ends[callees[-1]] == layout.ends[frame]


def test_cells_skip_only_what_would_not_show():
    """Narrow frames are skipped by bisection; a wide one after narrow ones in the same column still shows."""
    rng = random.Random(28)
    layout = FlameLayout(random_stacks(28))
    for width in (1, 7, 80, 161):
        for frame in [ROOT, *rng.sample(range(len(layout.starts)), 20)]:
            zoom = layout.zoom(frame)
            for depth in range(zoom.depth + 1, layout.depth):
                assert layout.cells(depth, width, zoom) == brute_cells(layout, depth, width, frame), (width, frame, depth)


def test_search_and_matched_count():
    layout = FlameLayout(STACKS)
    found = layout.matches("B")
    assert {layout.name(frame) for frame in found} == {"b"}
    both = layout.matches("a") | found  # a contains b: b's count is counted once
    assert layout.matched_count(both) == 10
    assert layout.matches("") == set()


def test_matched_count_counts_each_stack_once():
    stacks = random_stacks(29)
    layout = FlameLayout(stacks)
    for text in ("f", "g", "h", "i", "x"):
        expected = sum(count for stack, count in stacks.items() if text in stack)
        assert layout.matched_count(layout.matches(text)) == expected, text


def test_share():
    layout = FlameLayout(STACKS)
    a = layout.row(1)[0]
    assert layout.share(a) == pytest.approx(10 / 12)
    assert layout.share(layout.children(a)[0], of=a) == pytest.approx(0.6)


def test_folded_lines_read_back_what_count_writes():
    table = StackTable()
    for stack, count in STACKS.items():
        table.add(stack, None, count)
    table.add(("a", "b"), "dd", 2)  # by comm too: the comm is the outermost frame
    assert parse_folded(format_folded(table), "count.folded") == table.stacks()


def test_folded_lines():
    assert parse_folded("a;b 3\n\na;b 2\nc 1\n", "x.folded") == {("a", "b"): 5, ("c",): 1}
    for bad in ("a;b", "a;b x", " 3", "a 9" + "9" * 5000, "a ²"):
        with pytest.raises(UserError, match="x.folded:1: not a folded stack line"):
            parse_folded(bad, "x.folded")
