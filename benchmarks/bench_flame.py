"""Flame graph paint time for N distinct stacks (10k: the bound a run keeps, KPROBE_TUI_MAX_STACKS).

Prints the median of: the layout (``FlameLayout``, made once per data set) plus one full screen of
``render_line`` at 160x50 (every row of the view), at the whole graph and zoomed into the widest frame
below ``all``; beside the reference of the statistics table painting the same counts keyed by stack at
the same size. Two shapes of stacks, both 16 frames deep on average as kernel stacks are: "tree" (the
paths of a call tree, sharing their callers as a workload's stacks do: ~2 new frames a stack) and
"spread" (frames drawn at random below the system call entry: ~12 new frames a stack, the worst case).
Target: <= 50 ms. Wall and CPU time are both shown: on a shared machine the wall time waits for a core.
Usage: python benchmarks/bench_flame.py [--stacks N] [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from collections.abc import Callable

from textual.app import App

from kprobe_tui.aggregate.result import Entry, Result, Stats
from kprobe_tui.stream.flame import ROOT, FlameLayout
from kprobe_tui.stream.stacks import StackCounts
from kprobe_tui.tui.screens.flame import FlameScreen
from kprobe_tui.tui.widgets.flame import FlameView
from kprobe_tui.tui.widgets.stats_table import result_rows

SIZE = (160, 50)
ENTRY = ("entry_SYSCALL_64_after_hwframe+0x6e", "do_syscall_64+0x5d")
NAMES = [f"function_{index}+0x{index * 7 % 4096:x}" for index in range(3000)]


def tree_stacks(count: int, rng: random.Random) -> StackCounts:
    """Leaves of a random call tree: a function calls 1-3 others, a path ends more often the deeper it is."""
    stacks: StackCounts = {}

    def walk(path: list[str]) -> None:
        if len(stacks) >= count:
            return
        if rng.random() < (len(path) - 6) / 18:
            stacks[tuple(path)] = rng.randint(1, 1000)
            return
        for _ in range(rng.randint(1, 3)):
            walk([*path, rng.choice(NAMES)])

    while len(stacks) < count:
        walk(list(ENTRY))
    return stacks


def spread_stacks(count: int, rng: random.Random) -> StackCounts:
    stacks: StackCounts = {}
    while len(stacks) < count:
        stacks[ENTRY + tuple(rng.choice(NAMES[:40]) for _ in range(rng.randint(8, 20)))] = rng.randint(1, 1000)
    return stacks


def median_ms(action: Callable[[], object], rounds: int) -> tuple[float, float]:
    """(wall, CPU) milliseconds, the median of ``rounds``."""
    walls, cpus = [], []
    for _ in range(rounds):
        wall, cpu = time.perf_counter(), time.process_time()
        action()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls) * 1000, statistics.median(cpus) * 1000


class Host(App):
    def __init__(self, screen: FlameScreen) -> None:
        super().__init__()
        self.flame_screen = screen

    def on_mount(self) -> None:
        self.push_screen(self.flame_screen)


async def measure(stacks: StackCounts, rounds: int) -> dict[str, tuple[float, float]]:
    screen = FlameScreen({("warm up",): 1}, "bench")
    async with Host(screen).run_test(size=SIZE) as pilot:
        await pilot.pause()
        view = screen.query_one(FlameView)
        height = view.scrollable_content_region.height

        def paint(zoom_widest: bool, layout: FlameLayout | None = None) -> None:
            view.show(layout or FlameLayout(stacks))
            if zoom_widest:
                view.cursor = max(view.flame.children(ROOT), key=view.flame.count)
                view.action_zoom_in()
            for y in range(height):
                view.render_line(y)

        entries = tuple(Entry((stack,), Stats(count)) for stack, count in sorted(stacks.items(), key=lambda item: -item[1]))

        def reference() -> None:
            result = Result("count", "kernel", 0.0, 1.0, ("stack",), None, entries, Stats(sum(stacks.values())), None)
            result_rows(result, False, SIZE[0], height)

        times = {"flame graph: layout + a screen": median_ms(lambda: paint(False), rounds),
                 "flame graph: layout + zoom + a screen": median_ms(lambda: paint(True), rounds),
                 "reference: statistics table, a screen": median_ms(reference, rounds)}
        layout = FlameLayout(stacks)
        times["  of which the layout alone"] = median_ms(lambda: FlameLayout(stacks), rounds)
        times["  of which a screen alone"] = median_ms(lambda: paint(False, layout), rounds)
        print(f"  {len(layout.starts):,} frames in {layout.depth} rows")
        return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stacks", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    rng = random.Random(28)
    for shape, make in (("tree", tree_stacks), ("spread", spread_stacks)):
        stacks = make(args.stacks, rng)
        print(f"{shape}: {len(stacks):,} distinct stacks, {statistics.mean(map(len, stacks)):.1f} frames deep on average, "
              f"at {SIZE[0]}x{SIZE[1]}")
        for what, (wall, cpu) in asyncio.run(measure(stacks, args.rounds)).items():
            print(f"  {what:<40} {wall:7.1f} ms wall {cpu:7.1f} ms CPU")


if __name__ == "__main__":
    main()
