"""Function browser speed on the running kernel, with `perf probe --funcs` timed in the same run.

Prints: catalog build, time to first paint (app start -> list rows on screen), per filter keystroke
the UI thread's work (filter + render of the visible rows) and the time from the key event to the
first frame showing the new rows, cursor moves, and peak RSS. Usage: python benchmarks/bench_browser.py [--scale N]
(--scale N repeats the kernel's names N times, to see how the list behaves at N x the size).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import subprocess
import time

os.environ.setdefault("TEXTUAL_FPS", "120")  # as kprobe-tui itself runs (kprobe_tui/cli.py)

from textual import events  # noqa: E402  (after TEXTUAL_FPS: Textual reads it on import)

from kprobe_tui.kernel.catalog import Catalog
from kprobe_tui.kernel.sources import locate
from kprobe_tui.tui.app import KprobeTui
from kprobe_tui.tui.widgets.function_list import FunctionList

QUERIES = {"substring": "tcp_sendmsg", "glob": "tcp_*send*", "fuzzy": "tcpsndmsg"}


def ms(seconds: float) -> str:
    return f"{seconds * 1000:7.2f} ms"


def summary(samples: list[float]) -> str:
    samples = sorted(samples)
    p95 = samples[min(len(samples) - 1, int(len(samples) * 0.95))]
    return f"median {ms(statistics.median(samples))}  p95 {ms(p95)}  (n={len(samples)})"


class ScaledCatalog(Catalog):
    """The real catalog with its names repeated: to measure the list at a larger size."""

    scale = 1

    def __init__(self, sources) -> None:
        super().__init__(sources)
        if self.scale > 1:
            extra = [f"{name}__x{i}" for i in range(1, self.scale) for name in self.names]
            self.names = sorted(self.names + extra)


def render_visible(functions: FunctionList) -> None:
    for y in range(functions.scrollable_content_region.height):
        functions.render_line(y)


async def measure_ui(scale: int) -> None:
    ScaledCatalog.scale = scale
    start = time.perf_counter()
    app = KprobeTui(locate())
    app.load_catalog = lambda: setattr(app, "catalog", ScaledCatalog(app.sources)) or app.catalog
    frames: list[float] = []
    display = app._display  # private, but the one place a finished frame goes: key -> frame needs it

    def record_frame(screen, renderable) -> None:
        frames.append(time.perf_counter())
        display(screen, renderable)

    app._display = record_frame
    keys: list[float] = []

    def record_key(message) -> None:
        if isinstance(message, events.Key):
            keys.append(time.perf_counter())

    async with app.run_test(size=(80, 24), message_hook=record_key) as pilot:
        functions = None
        while True:
            await pilot.pause(0.005)
            if app.screen.is_mounted and app.screen.query(FunctionList):
                functions = app.screen.query_one(FunctionList)
                if functions.rows:
                    break
        first_paint = time.perf_counter() - start
        print(f"first paint (start -> rows on screen): {ms(first_paint)}  rows={len(functions.rows):,}")
        screen = app.screen
        filter_input = screen.query_one("#filter")
        filtered: list[float] = []
        set_rows = functions.set_rows
        functions.set_rows = lambda *a, **k: filtered.append(time.perf_counter()) or set_rows(*a, **k)
        await pilot.press("slash")
        for mode, query in QUERIES.items():
            screen.mode = mode
            work, to_frame = [], []
            for _ in range(3):
                for char in query:
                    keys.clear()
                    filtered.clear()
                    seen = len(frames)
                    await pilot.press(char)
                    to_frame.append(next(t for t in frames[seen:] if t >= filtered[0]) - keys[0])
                for _ in query:
                    await pilot.press("backspace")
            for end in range(1, len(query) + 1):  # the UI thread's work alone, per keystroke
                filter_input.value = query[:end]
                await pilot.pause()
                t0 = time.perf_counter()
                screen.apply_filter()
                render_visible(functions)
                work.append(time.perf_counter() - t0)
            filter_input.value = ""
            await pilot.pause()
            print(f"keystroke {mode:9s} filter + render rows {summary(work)}")
            print(f"keystroke {mode:9s} key -> frame        {summary(to_frame)}")
        functions.focus()
        moves = []
        for key in ["down"] * 60 + ["pagedown"] * 20 + ["up"] * 60:
            t0 = time.perf_counter()
            functions.action_move(1) if key == "down" else functions.action_page(1) if key == "pagedown" else functions.action_move(-1)
            render_visible(functions)
            moves.append(time.perf_counter() - t0)
        print(f"cursor move (move + render visible rows) {summary(moves)}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scale", type=int, default=1)
    args = parser.parse_args()
    asyncio.run(measure_ui(args.scale))
    # Measured before the extra catalog builds below, whose garbage would count too.
    print(f"peak RSS of the app: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    builds = []
    for _ in range(3):
        t0 = time.perf_counter()
        catalog = Catalog(locate())
        builds.append(time.perf_counter() - t0)
    print(f"catalog build: {summary(builds)}  functions={len(catalog):,}")
    t0 = time.perf_counter()
    statuses = [catalog.status(name) for name in catalog.names]
    print(f"status of every function: {ms(time.perf_counter() - t0)} ({len(statuses):,})")
    perf = []
    for _ in range(3):
        t0 = time.perf_counter()
        result = subprocess.run(["perf", "probe", "--funcs"], capture_output=True)
        perf.append(time.perf_counter() - t0)
    listed = len(result.stdout.splitlines())
    print(f"reference: perf probe --funcs {summary(perf)}  ({listed:,} lines, exit {result.returncode})")


if __name__ == "__main__":
    main()
