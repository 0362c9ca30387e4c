"""Key-to-screen latency of the TUI flow's main actions: open source, open builder, create probe.

"Key to screen" is from the key event to the first frame drawn after the new screen's content
landed (the source text or the BTF fallback; the builder's form, then its compiled preview; the
events screen after Create). Two targets: the running kernel (BTF path: no DWARF here, so the
source view falls back to the prototype; no kprobes on this kernel, so no Create) and libpython
with -x (DWARF: source, a line probe, a real uprobe). Each run is a fresh process: its first
pass is cold, the following passes warm. Reference, same run: a cursor move's key -> frame (the
floor every key pays) and `perf probe -x LIB -V FUNC` (the command-line way to see what a probe
there can capture; its -L needs the source files, which libpython's build tree no longer has).

Usage: python benchmarks/bench_tui_flow.py [--runs 3] [--warm 5]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("TEXTUAL_FPS", "120")  # as kprobe-tui itself runs (kprobe_tui/cli.py)

from textual import events  # after TEXTUAL_FPS: Textual reads it on import

from kprobe_tui.kernel import lifetime
from kprobe_tui.kernel.sources import locate
from kprobe_tui.probes.binary import BinaryCatalog
from kprobe_tui.tui.app import KprobeTui
from kprobe_tui.tui.screens.builder import ProbeBuilderScreen
from kprobe_tui.tui.screens.events import EventsScreen
from kprobe_tui.tui.screens.source import SourceScreen
from kprobe_tui.tui.widgets.function_list import FunctionList
from kprobe_tui.tui.widgets.probe_preview import ProbePreview

LIBPYTHON = "/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0"
TARGETS = {"kernel": (None, "do_sys_openat2"), "libpython": (LIBPYTHON, "PyObject_GetAttr")}
ACTIONS = ("cursor move (floor)", "open source", "open builder (form)", "open builder (preview)", "create probe")

marks: dict[str, list[float]] = {}  # content landed, per kind: stamped by the wrappers below


def stamp(cls, method: str, kind: str) -> None:
    original = getattr(cls, method)

    @functools.wraps(original)  # Textual passes the event only to handlers whose signature takes it
    def stamped(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        marks.setdefault(kind, []).append(time.perf_counter())
        return result

    setattr(cls, method, stamped)


stamp(SourceScreen, "_show_source", "source")
stamp(SourceScreen, "_show_fallback", "source")
stamp(ProbeBuilderScreen, "on_mount", "form")
stamp(ProbePreview, "show", "preview")
stamp(EventsScreen, "on_mount", "events")
stamp(FunctionList, "move_cursor", "cursor")


class Clock:
    """Key events and finished frames of one app, to pair a key with the frame that shows its effect."""

    def __init__(self, app: KprobeTui) -> None:
        self.keys: list[float] = []
        self.frames: list[float] = []
        display = app._display  # private, but the one place a finished frame goes (as bench_browser)

        def record_frame(screen, renderable) -> None:
            self.frames.append(time.perf_counter())
            display(screen, renderable)

        app._display = record_frame

    def hook(self, message) -> None:
        if isinstance(message, events.Key):
            self.keys.append(time.perf_counter())

    async def press(self, pilot, key: str, *kinds: str) -> list[float]:
        """Press ``key``; for each kind of content, the seconds from the key to the frame showing it."""
        self.keys.clear()
        await pilot.press(key)
        pressed = self.keys[0]
        found = []
        for kind in kinds:
            for _ in range(2000):  # 10 s at most: a worker thread may be reading DWARF
                landed = [t for t in marks.get(kind, []) if t >= pressed]
                frame = [t for t in self.frames if landed and t >= landed[0]]
                if frame:
                    break
                await pilot.pause(0.005)
            else:
                raise RuntimeError(f"{key}: the {kind} never showed")
            found.append(frame[0] - pressed)
        return found


async def one_target(name: str, passes: int) -> dict[str, list[float]]:
    binary, function = TARGETS[name]
    app = KprobeTui(locate(), BinaryCatalog(binary) if binary else None)
    clock = Clock(app)
    samples: dict[str, list[float]] = {action: [] for action in ACTIONS}
    async with app.run_test(size=(120, 36), message_hook=clock.hook) as pilot:
        functions = app.screen.query_one(FunctionList)
        while not functions.rows:
            await pilot.pause(0.01)
        await pilot.press("slash", *function, "escape")
        assert functions.current == function, functions.current
        for _ in range(passes):
            samples["cursor move (floor)"] += await clock.press(pilot, "down", "cursor")
            await clock.press(pilot, "up", "cursor")
            samples["open source"] += await clock.press(pilot, "enter", "source")
            source = app.screen
            # fallback: Entry (the focused button); with DWARF: a line probe on the first probeable line
            form, preview = await clock.press(pilot, "enter", "form", "preview")
            samples["open builder (form)"].append(form)
            samples["open builder (preview)"].append(preview)
            if source.fallback:
                await pilot.press("escape")
            else:
                samples["create probe"] += await clock.press(pilot, "ctrl+s", "events")
                await pilot.press("escape", "escape")  # events -> builder -> source
            await pilot.press("escape")
            assert isinstance(app.screen.query_one(FunctionList), FunctionList)
    return {action: values for action, values in samples.items() if values}


def perf_reference(runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(["perf", "probe", "-x", LIBPYTHON, "-V", TARGETS["libpython"][1]],
                       capture_output=True, check=True)
        times.append(time.perf_counter() - t0)
    return times


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.1f}"


def line(label: str, values: list[float]) -> str:
    if not values:
        return f"{label:34s} {'-':>8s} {'-':>8s}  (n=0)"
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return f"{label:34s} {ms(statistics.median(ordered))} {ms(p95)}  (n={len(ordered)})"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3, help="fresh processes (each gives one cold pass)")
    parser.add_argument("--warm", type=int, default=5, help="warm passes per process")
    parser.add_argument("--one", choices=TARGETS, help=argparse.SUPPRESS)  # a child: one target, JSON out
    args = parser.parse_args()
    if args.one:
        try:
            result = asyncio.run(one_target(args.one, 1 + args.warm))
        finally:
            lifetime.undo.run_all()  # the probes Create made, as the end of kprobe-tui does
        print(json.dumps(result))
        return
    print(f"key -> frame showing the new screen, ms ({args.runs} fresh processes, 1 cold + {args.warm} warm passes each)")
    print(f"{'':34s} {'median':>8s} {'p95':>8s}")
    for target in TARGETS:
        cold: dict[str, list[float]] = {}
        warm: dict[str, list[float]] = {}
        for _ in range(args.runs):
            command = [sys.executable, __file__, "--one", target, "--warm", str(args.warm)]
            out = subprocess.run(command, capture_output=True, text=True, check=True)
            for action, values in json.loads(out.stdout.splitlines()[-1]).items():
                cold.setdefault(action, []).append(values[0])
                warm.setdefault(action, []).extend(values[1:])
        print(f"[{target}: {TARGETS[target][1]}]")
        for action in ACTIONS:
            if action in cold:
                print(line(f"  {action}, cold", cold[action]))
                print(line(f"  {action}, warm", warm[action]))
    print(line(f"reference: perf probe -x libpython -V {TARGETS['libpython'][1]}", perf_reference(args.runs)))


if __name__ == "__main__":
    main()
