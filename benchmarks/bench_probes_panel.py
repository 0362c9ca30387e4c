"""Probes panel refresh cost, with N real uprobes on a program compiled here (removed at the end).

Prints: one sample off the UI thread (dynamic events, profiles, enable files) beside the reference
of reading dynamic_events once; on the UI thread, applying a sample where nothing changed (the
per-cell diff) beside rebuilding every row. Usage: python benchmarks/bench_probes_panel.py [--probes N]
(as root, on a kernel with uprobes).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from textual.app import App

from kprobe_tui.kernel.sources import locate
from kprobe_tui.kernel.tracefs import Tracefs
from kprobe_tui.probes.symbols import ElfSymbols
from kprobe_tui.tui.screens.probes import ProbesScreen

GROUP = "kptuibench"
C_PROGRAM = Path(__file__).parents[1] / "tests" / "live" / "c" / "basic.c"
ROUNDS = 30


def median_ms(action, rounds: int = ROUNDS) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


class Host(App):
    def __init__(self, screen: ProbesScreen) -> None:
        super().__init__()
        self._screen = screen

    def on_mount(self) -> None:
        self.push_screen(self._screen)


async def ui_thread(top: Tracefs) -> tuple[float, float, int]:
    screen = ProbesScreen(top)
    async with Host(screen).run_test(size=(120, 40)) as pilot:
        while screen.sample is None:
            await pilot.pause(0.05)
        sample = screen.sample
        unchanged = median_ms(lambda: screen.show_sample(sample))

        def rebuild() -> None:
            screen._reset_table()
            screen.show_sample(sample)

        rebuilt = median_ms(rebuild)
        return unchanged, rebuilt, len(screen.shown)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--probes", type=int, default=50)
    args = parser.parse_args()
    top = locate().tracing()
    with tempfile.TemporaryDirectory() as directory:
        binary = Path(directory) / "basic"
        subprocess.run(["gcc", "-O1", "-o", str(binary), str(C_PROGRAM)], check=True)
        offset = ElfSymbols(binary).function("add3").file_offset
        names = [f"p{index}" for index in range(args.probes)]
        try:
            for name in names:
                top.write("uprobe_events", f"p:{GROUP}/{name} {binary}:0x{offset:x}\n")
            screen = ProbesScreen(top)
            reference = median_ms(lambda: top.read("dynamic_events"))
            sample = median_ms(screen.read_sample)
            unchanged, rebuilt, rows = asyncio.run(ui_thread(top))
        finally:
            for name in names:
                top.write("uprobe_events", f"-:{GROUP}/{name}\n")
    print(f"{rows} dynamic events listed ({args.probes} made here), median of {ROUNDS}")
    print(f"  sample off the UI thread   {sample:8.2f} ms   reference: read dynamic_events once {reference:.2f} ms"
          f"  ({sample / reference:.1f}x)")
    print(f"  UI thread, nothing changed {unchanged:8.2f} ms   reference: rebuild every row {rebuilt:.2f} ms"
          f"  ({rebuilt / unchanged:.1f}x less work)")


if __name__ == "__main__":
    main()
