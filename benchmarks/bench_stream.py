"""Live tail speed: reader + parser + store, against `cat trace_pipe` on the same events.

Needs root and uprobes (this machine). It compiles tests/live/c/tail_values.c, puts a uprobe on
hit(), and measures:
  1. drain rate of a full kernel buffer (the same 300k-call flood recorded each time), in wall time
     and per CPU-second, by `cat trace_pipe > /dev/null` (the text ceiling), a Python read of the
     per-CPU `trace_pipe_raw` pages without decoding (the raw-page ceiling), plus a minimal Python
     decode of them (the raw-decode ceiling), and our StreamReader on the text trace_pipe (read +
     parse + store) and on the binary pages (read + decode + store);
  2. the live flood: events/s the program produces, what our reader stored, and what was lost;
  3. a replayed capture through LineParser + EventStore (target >= 250k events/s);
  4. the events screen while ingesting a flood: frame (full-screen render) time, key round trip
     (key event delivered -> the table acted on it), and kernel-event -> visible-row latency (trace_clock mono);
  5. peak RSS of a fresh process holding 1M events (target <= 500 MB), before and after a filter
     on an argument (which parses every event's arguments).
With --kprobe, step 1 only, on a kprobe on vfs_read flooded by `dd bs=1` (the QEMU guests, which have no
compiler for the uprobe's program: `tests/kernel/harness.py shell debian-6.1 -- sh -c 'cd /work/main &&
python3 benchmarks/bench_stream.py --kprobe --calls 100000'`).
Usage: python benchmarks/bench_stream.py [--calls N] [--drain-only | --kprobe]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from kprobe_tui.kernel import lifetime
from kprobe_tui.kernel.instance import Instance
from kprobe_tui.kernel.sources import locate
from kprobe_tui.kernel.tracefs import Tracefs
from kprobe_tui.probes.symbols import ElfSymbols
from kprobe_tui.stream.parser import LineParser
from kprobe_tui.stream.reader import RawPagesSource, StreamReader, StreamUpdate
from kprobe_tui.stream.store import EventStore

ROOT = Path(__file__).resolve().parents[1]
GROUP = "kptbench"
PROBE = "n=%di:s64 s=+0(%si):string arr=+0(%dx):s32[4]"
# The same field types on vfs_read (count, the caller's name, the first words of the struct file), recorded for
# dd only: the readers' own reads of the buffer go through vfs_read too.
KPROBE = "vfs_read n=%dx:s64 s=$comm:string arr=+0(%di):s32[4]"
KPROBE_FILTER = 's == "dd"'


def per_cpu_stat(instance: Instance, field: str) -> int:
    total = 0
    for cpu in instance.lost():
        text = instance.tracefs.read(f"per_cpu/cpu{cpu}/stats")
        total += sum(int(line.split(":")[1]) for line in text.splitlines() if line.startswith(field + ":"))
    return total


def fill(instance: Instance, flood: list[str]) -> int:
    """Record a flood with nobody reading, then stop recording: returns the events held."""
    instance.tracefs.write("tracing_on", "1", append=False)
    subprocess.run(flood, check=True)
    instance.tracefs.write("tracing_on", "0", append=False)
    return per_cpu_stat(instance, "entries")


class Spent:
    """Wall and CPU seconds of a block: this process's CPU (every thread, user and system: the kernel's
    copying and formatting for our reads included), or with ``children`` the CPU of the programs it ran."""

    def __init__(self, children: bool = False) -> None:
        self.who = resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF
        self.wall = self.cpu = 0.0

    def _cpu(self) -> float:
        usage = resource.getrusage(self.who)
        return usage.ru_utime + usage.ru_stime

    def __enter__(self) -> Spent:
        self._wall, self._cpu0 = time.perf_counter(), self._cpu()
        return self

    def __exit__(self, *exc) -> None:
        self.wall += time.perf_counter() - self._wall
        self.cpu += self._cpu() - self._cpu0


def drain_cat(instance: Instance) -> Spent:
    with Spent(children=True) as spent:
        subprocess.run(["cat", instance.trace_pipe], stdout=subprocess.DEVNULL, check=True)
    return spent


def read_raw(instance: Instance, spent: Spent) -> list[bytes]:
    """Read every CPU's trace_pipe_raw pages (no decoding)."""
    pages = []
    with spent:
        for cpu in instance.lost():
            fd = os.open(instance.tracefs.path(f"per_cpu/cpu{cpu}/trace_pipe_raw"), os.O_RDONLY | os.O_NONBLOCK)
            try:
                while True:
                    try:
                        page = os.read(fd, 4096)
                    except BlockingIOError:
                        break
                    if not page:
                        break
                    pages.append(page)
            finally:
                os.close(fd)
    return pages


def decode_raw(pages: list[bytes]) -> int:
    """The least a binary reader must do in Python: walk each page's records (header_page and
    header_event layouts), unpack the probe's fields (events/kptbench/hit/format) and make one
    tuple per event. No comm (raw records have none), no timestamps summed, no other event types."""
    header, fields, u32 = struct.Struct("<Q q"), struct.Struct("<HBBiQqI16s"), struct.Struct("<I")
    events = []
    for page in pages:
        _, commit = header.unpack_from(page)
        end, at = 16 + (commit & 0xFFFFF), 16
        while at < end:
            word = u32.unpack_from(page, at)[0]
            type_len = word & 0x1F
            if type_len == 0:
                size, data = u32.unpack_from(page, at + 4)[0] - 4, at + 8
            elif type_len <= 28:
                size, data = type_len * 4, at + 4
            elif type_len == 29:  # padding: the rest of the page, or a length
                if word >> 5 == 0:
                    break
                size, data = u32.unpack_from(page, at + 4)[0] - 4, at + 8
                at = data + size
                continue
            else:  # 30: time extend, 31: absolute time stamp
                at += 8
                continue
            _, _, _, pid, ip, n, loc, arr = fields.unpack_from(page, data)
            offset, length = loc & 0xFFFF, loc >> 16
            events.append((pid, ip, n, page[data + offset:data + offset + length - 1].decode(),
                           struct.unpack("<4i", arr)))
            at = data + size
    return len(events)


def drain_ours(instance: Instance, expected: int, binary: bool) -> tuple[Spent, int]:
    """Our StreamReader on a full buffer: the text trace_pipe, or (``binary``) the per-CPU pages."""
    store = EventStore(expected + 10)
    done = threading.Event()

    def on_update(update: StreamUpdate) -> None:
        if store.total >= expected or update.finished:
            done.set()

    reader = StreamReader(instance, store, on_update, events=[(GROUP, "hit")] if binary else None)
    assert isinstance(reader.source, RawPagesSource) == binary, reader.notice
    # This thread sleeps until the reader's update says all came: polling the store 100 times a second cost
    # 0.2-0.3 of the 2-3 CPU-seconds the binary reader took for 100k events in the 6.1 guest.
    with Spent() as spent:
        reader.start()
        done.wait(120)
    reader.stop()
    return spent, store.total


def rate(count: int, seconds: float) -> str:
    return f"{count / seconds:>11,.0f} events/s"


def rates(count: int, spent: Spent) -> str:
    return f"{count:>8,} events: {count / spent.wall:>10,.0f} /s wall, {count / spent.cpu:>10,.0f} per CPU-second"


def bench_drain(top: Tracefs, flood: list[str]) -> list[str]:
    """Each way drains the same flood, recorded anew with nobody reading. The machine is shared: the ratios
    are of events per CPU-second (user + system), which other load disturbs less than wall time."""
    instance = Instance(top)
    instance.create(buffer_kb=65536)
    instance.enable(GROUP, "hit")
    try:
        held = fill(instance, flood)
        cat = drain_cat(instance)
        held_raw = fill(instance, flood)
        raw = Spent()
        pages = read_raw(instance, raw)
        decode = Spent()
        with decode:
            decoded = decode_raw(pages)
        ceiling = Spent()
        ceiling.wall, ceiling.cpu = raw.wall + decode.wall, raw.cpu + decode.cpu
        text, text_count = drain_ours(instance, fill(instance, flood), binary=False)
        ours, ours_count = drain_ours(instance, fill(instance, flood), binary=True)
    finally:
        instance.remove()

    def per_cpu_second(count: int, spent: Spent) -> float:
        return count / spent.cpu

    return [
        "1. draining a full buffer (same flood each time)",
        f"   cat trace_pipe > /dev/null            {rates(held, cat)}   (the text ceiling)",
        f"   read the per-CPU trace_pipe_raw pages {rates(held_raw, raw)}   ({sum(map(len, pages)) / 2**20:.1f} MiB:"
        " the raw-page ceiling)",
        f"   + a minimal Python decode of them     {rates(decoded, ceiling)}   (the raw-decode ceiling)",
        f"   StreamReader, text trace_pipe         {rates(text_count, text)}",
        f"   StreamReader, binary pages            {rates(ours_count, ours)}",
        f"   binary reader = {per_cpu_second(ours_count, ours) / per_cpu_second(decoded, ceiling):.2f} x the raw-decode "
        f"ceiling (goal >= 0.8), {per_cpu_second(ours_count, ours) / per_cpu_second(text_count, text):.2f} x the text "
        "reader (goal >= 2)",
    ]


def bench_live(top: Tracefs, binary: Path, calls: int) -> list[str]:
    from kprobe_tui.stream.session import TailSession

    session = TailSession(top, [f"{GROUP}/hit"], max_events=calls + 10)
    session.start(lambda update: None)
    try:
        start = time.perf_counter()
        subprocess.run([str(binary), str(calls), "quiet"], check=True)
        produced = time.perf_counter() - start
        deadline = time.perf_counter() + 30
        while session.store.total + session.reader.lost < calls and time.perf_counter() < deadline:
            time.sleep(0.01)
        behind = time.perf_counter() - start - produced
    finally:
        session.stop()
    return [
        "2. live flood through the reader",
        f"   the program produced {calls:,} hits in {produced:.2f} s = {rate(calls, produced)} (uprobe trap cost bounds it)",
        f"   stored {session.store.total:,}, lost {session.reader.lost:,}, reader done {behind * 1000:.0f} ms after the flood",
    ]


def capture_lines(top: Tracefs, binary: Path) -> list[str]:
    instance = Instance(top)
    instance.create(buffer_kb=16384, options={"record-tgid": True})
    instance.enable(GROUP, "hit")
    try:
        fill(instance, [str(binary), "20000", "quiet"])
        with tempfile.TemporaryFile() as out:
            subprocess.run(["cat", instance.trace_pipe], stdout=out, check=True)
            out.seek(0)
            return out.read().decode().splitlines()
    finally:
        instance.remove()


def bench_replay(lines: list[str], total: int = 1_000_000) -> list[str]:
    repeated = (lines * (total // len(lines) + 1))[:total]
    chunks = [repeated[i:i + 600] for i in range(0, total, 600)]  # ~64 KB reads
    parser, store = LineParser(), EventStore()
    start = time.perf_counter()
    for chunk in chunks:
        store.extend(parser.feed(chunk))
    elapsed = time.perf_counter() - start
    start = time.perf_counter()
    for chunk in chunks:
        for _line in chunk:
            pass
    baseline = time.perf_counter() - start
    return [
        "3. replayed capture (real lines from step 1's probe) through LineParser + EventStore",
        f"   {total:,} events in {elapsed:.2f} s = {rate(total, elapsed)}   target >= 250,000 events/s",
        f"   (a bare Python loop over the same lines: {rate(total, baseline)})",
    ]


def bench_rss(lines: list[str]) -> list[str]:
    capture = Path(tempfile.mkstemp(suffix=".txt")[1])
    capture.write_text("\n".join(lines))
    code = f"""
import resource
from pathlib import Path
from kprobe_tui.stream.filterexpr import compile_filter, parse
from kprobe_tui.stream.parser import LineParser
from kprobe_tui.stream.store import EventStore
lines = Path({str(capture)!r}).read_text().splitlines()
parser, store = LineParser(), EventStore(1_000_000)
while store.total < 1_200_000:
    store.extend(parser.feed(lines))
del lines
stored = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
store.set_filter(compile_filter(parse('n > 5000 && s ~ "*a*"')))
print(f"{{len(store)}} {{stored:.0f}} {{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f}} {{store.view_len()}}")
"""
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    finally:
        capture.unlink()
    held, stored_mb, filtered_mb, matches = out.split()
    return [
        "5. peak RSS of a fresh process",
        f"   {int(held):,} events stored: {stored_mb} MB; after a filter on arguments ({int(matches):,} match): "
        f"{filtered_mb} MB   target <= 500 MB",
    ]


async def bench_ui(top: Tracefs, binary: Path, calls: int) -> list[str]:
    from textual import events
    from textual.app import App

    from kprobe_tui.tui.screens.events import EventsScreen
    from kprobe_tui.tui.widgets.event_table import EventTable

    class Host(App):
        def on_mount(self) -> None:
            self.push_screen(screen)

    screen = EventsScreen([f"{GROUP}/hit"], top, max_events=1_000_000)
    app = Host()
    frames, keys, visible = [], [], []
    painted = {"total": 0, "at": 0.0}

    async def until(condition, what: str, limit: float = 10.0) -> None:
        deadline = time.monotonic() + limit
        while not condition():
            if time.monotonic() > deadline:
                raise TimeoutError(f"bench_ui: {what} did not happen within {limit} s")
            await asyncio.sleep(0.001)

    async with app.run_test(size=(80, 24)):
        await until(lambda: screen.session is not None, "the recording starts (off the UI thread)")
        assert screen.session is not None
        screen.session.instance.tracefs.write("trace_clock", "mono", append=False)
        table = screen.query_one(EventTable)
        render_line = table.render_line

        def render_and_note(y: int):
            painted["total"], painted["at"] = screen.store.total, time.monotonic()
            return render_line(y)

        table.render_line = render_and_note  # when a row reaches the screen
        flood = subprocess.Popen([str(binary), str(calls), "quiet"])
        await until(lambda: screen.store.total >= 2, "the first events")
        while flood.poll() is None:
            start = time.perf_counter()
            app.screen._compositor.render_update(full=True)
            frames.append(time.perf_counter() - start)
            for key, done in (("up", lambda: not table.following), ("end", lambda: table.following)):
                # A key as the terminal driver delivers it; done when the table has acted on it.
                start = time.perf_counter()
                app._driver.send_message(events.Key(key, None))
                await until(done, f"key {key}")
                keys.append(time.perf_counter() - start)
            await asyncio.sleep(0.05)
        flood.wait()
        await asyncio.sleep(1.0)
        # kernel event -> row on screen: one call at a time, idle otherwise
        for _ in range(10):
            before = screen.store.total
            subprocess.run([str(binary), "1", "quiet"], check=True)
            await until(lambda before=before: screen.store.total > before and painted["total"] > before,
                        "a new row painted")
            visible.append(painted["at"] - screen.store.view_row(screen.store.view_len() - 1).ts)
            await asyncio.sleep(0.05)
        stored = screen.store.total
    return [
        f"4. events screen during a {calls:,}-call flood ({stored:,} events ingested), 80x24",
        f"   full-screen frame render: {summary(frames)}   target <= 50 ms",
        f"   key -> handled by the table: {summary(keys)}   target <= 200 ms (plus one frame to show it)",
        f"   kernel event -> visible row (idle): {summary(visible)}",
    ]


def summary(samples: list[float]) -> str:
    samples = sorted(samples)
    p95 = samples[min(len(samples) - 1, int(len(samples) * 0.95))]
    return f"median {statistics.median(samples) * 1000:6.1f} ms, p95 {p95 * 1000:6.1f} ms (n={len(samples)})"


@contextlib.contextmanager
def kprobe_on_vfs_read(top: Tracefs) -> Iterator[None]:
    """The kprobe, for dd only, removed however the run ends (SIGTERM from a timeout included)."""
    top.write("kprobe_events", f"p:{GROUP}/hit {KPROBE}\n")
    token = lifetime.undo.push(f"probe {GROUP}/hit", lambda: top.write("kprobe_events", f"-:{GROUP}/hit\n"))
    try:
        top.write(f"events/{GROUP}/hit/filter", KPROBE_FILTER, append=False)
        yield
    finally:
        lifetime.undo.run(token)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300_000, help="calls per flood")
    parser.add_argument("--drain-only", action="store_true", help="step 1 only")
    parser.add_argument("--kprobe", action="store_true", help="step 1 only, on a kprobe on vfs_read (dd bs=1)")
    args = parser.parse_args()
    top = locate().tracing()
    if args.kprobe:
        with kprobe_on_vfs_read(top):
            print("\n".join(bench_drain(top, ["dd", "if=/dev/zero", "of=/dev/null", "bs=1", f"count={args.calls}",
                                              "status=none"])), flush=True)
        return
    with tempfile.TemporaryDirectory() as tmp:
        binary = Path(tmp) / "tail_values"
        subprocess.run(["gcc", "-O1", "-o", str(binary), str(ROOT / "tests/live/c/tail_values.c")], check=True)
        offset = ElfSymbols(binary).function("hit").file_offset
        top.write("uprobe_events", f"p:{GROUP}/hit {binary}:0x{offset:x} {PROBE}\n")
        # removed however the run ends (SIGTERM from a timeout included)
        token = lifetime.undo.push(f"probe {GROUP}/hit", lambda: top.write("uprobe_events", f"-:{GROUP}/hit\n"))
        try:
            print("\n".join(bench_drain(top, [str(binary), str(args.calls), "quiet"])), flush=True)
            if args.drain_only:
                return
            print("\n".join(bench_live(top, binary, args.calls)), flush=True)
            lines = capture_lines(top, binary)
            print("\n".join(bench_replay(lines)), flush=True)
            print("\n".join(asyncio.run(bench_ui(top, binary, args.calls))), flush=True)
            print("\n".join(bench_rss(lines)), flush=True)
        finally:
            lifetime.undo.run(token)


if __name__ == "__main__":
    main()
