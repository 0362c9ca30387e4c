"""The screen states shown in screenshots/ and checked by the snapshot tests: one definition for both.

Each ``State`` builds the real app (``KprobeTui``) on fixed inputs (Debian 6.1's captured tracing
data, C programs compiled at fixed paths, captured trace lines, PID 4242) and drives it with Pilot
to the state, so the pictures are the same on every machine. ``tests/tui/test_screens.py``
compares each against its approved SVG; ``screenshots/generate.py`` writes them for the README.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

from textual.pilot import Pilot
from textual.widgets import Input, Tree

from kprobe_tui.debuginfo.debuginfod import Progress
from kprobe_tui.debuginfo.locate import KERNEL_PACKAGE_HINT, ElfSections
from kprobe_tui.errors import UserError
from kprobe_tui.kernel import lifetime
from kprobe_tui.kernel.events import Events
from kprobe_tui.kernel.snapshot import open_snapshot
from kprobe_tui.kernel.sources import locate
from kprobe_tui.kernel.tracefs import Tracefs
from kprobe_tui.probes.binary import BinaryCatalog
from kprobe_tui.probes.symbols import ElfSymbols
from kprobe_tui.stream.parser import LineParser
from kprobe_tui.tui.app import KprobeTui
from kprobe_tui.tui.screens.events import EventsScreen
from kprobe_tui.tui.screens.probes import ProbesScreen
from kprobe_tui.tui.screens.source import DebugTarget
from kprobe_tui.tui.widgets.download_bar import DownloadBar
from kprobe_tui.tui.widgets.function_list import FunctionList
from kprobe_tui.tui.widgets.variable_tree import VariableTree
from tests.debuginfod_servers import ServedFile

TESTS = Path(__file__).parents[1]
SNAPSHOT_61 = TESTS / "fixtures" / "snapshots" / "debian-6.1.tar.gz"
SNAPSHOT_RELEASE = "6.1.0-57-amd64"
TRACE_LINES = [TESTS / "fixtures" / "trace_lines" / name for name in ("uprobe_plain.txt", "uprobe_tgid_stack.txt")]
PROGRAMS = Path("/tmp/kprobe-tui-screens")  # fixed: the paths show on screen
FIXED_PID = 4242  # our group kptui_<pid> and the own-PID filter show in the builder
# Where the pretended run locks its name: a directory of this process's own, so that kptui_4242 is free
# whatever another test process, or a killed one, did with /run/kprobe-tui (see kernel/lifetime.py).
OWN_LOCKS = Path(tempfile.mkdtemp(prefix="kprobe-tui-screens-locks-"))
atexit.register(shutil.rmtree, OWN_LOCKS, True)
SIZES = ((80, 24), (160, 50))
ADMIN_GROUP = "kptuiscreens"  # the probes panel's state: a probe as an administrator's perf probe makes it
OUR_HITS = 3  # the probes panel's state: our probe's hit count


@dataclass(frozen=True)
class State:
    """``app()`` builds the app; ``reach`` drives it there; ``sizes`` it is shown at; ``kernel``, when
    the state needs something in the live kernel, puts it there and takes it away (root, uprobes)."""

    name: str
    app: Callable[[], KprobeTui]
    reach: Callable[[Pilot], Awaitable[None]]
    sizes: tuple[tuple[int, int], ...] = SIZES
    kernel: Callable[[], AbstractContextManager] | None = None
    server: Callable[[], AbstractContextManager] | None = None  # a debuginfod server of the state's own

    def environment(self) -> AbstractContextManager:
        """Where the state is reached and shot: the fixed PID, and the kernel and server set-up if any."""
        stack = contextlib.ExitStack()
        stack.enter_context(mock.patch("os.getpid", return_value=FIXED_PID))
        stack.enter_context(mock.patch.object(lifetime, "LOCK_DIR", OWN_LOCKS))
        if self.kernel is not None:
            stack.enter_context(self.kernel())
        if self.server is not None:
            stack.enter_context(self.server())
        return stack


def compile_program(name: str, source: Path, *flags: str, headers: tuple[Path, ...] = ()) -> Path:
    """``source`` built reproducibly at a fixed path under /tmp (once per source change).

    The screens show the program's paths and its build-id, and the build-id hashes the DWARF, which
    names the directory gcc ran in: the sources are copied to PROGRAMS and compiled there, so every
    checkout (wherever it is) builds the same bytes.
    """
    if shutil.which("gcc") is None:
        raise RuntimeError("gcc is needed to build the program shown in the screenshots")
    PROGRAMS.mkdir(exist_ok=True)
    copies = [PROGRAMS / original.name for original in (source, *headers)]
    for original, copy in zip((source, *headers), copies):
        if not copy.exists() or copy.read_bytes() != original.read_bytes():
            shutil.copyfile(original, copy)  # only then newer than the binary, which is then rebuilt
    binary = PROGRAMS / name
    if not binary.exists() or binary.stat().st_mtime < max(copy.stat().st_mtime for copy in copies):
        subprocess.run(["gcc", *flags, "-o", name, source.name], check=True, cwd=PROGRAMS)
    return binary


def probed_program() -> Path:
    c_dir = TESTS / "debuginfo" / "c"
    return compile_program("probed", c_dir / "probed.c", "-O2", "-gdwarf-5", headers=tuple(c_dir.glob("*.h")))


def stripped_program() -> tuple[Path, bytes]:
    """probed stripped to a .gnu_debuglink whose file is not here (a server has it): (binary, debug file)."""
    full = probed_program()
    binary, debug = PROGRAMS / "probed-stripped", PROGRAMS / "probed-stripped.debug"
    subprocess.run(["objcopy", "--only-keep-debug", str(full), str(debug)], check=True)
    subprocess.run(["objcopy", "--strip-debug", f"--add-gnu-debuglink={debug}", str(full), str(binary)], check=True,
                   cwd=PROGRAMS)
    data = debug.read_bytes()
    debug.unlink()
    return binary, data


@contextlib.contextmanager
def stalled_debuginfod() -> Iterator[None]:
    """A server of our own with the stripped program's debug file, stopping halfway through it (the
    download's state is on screen then); DEBUGINFOD_URLS names it, a fresh cache receives."""
    binary, data = stripped_program()
    with tempfile.TemporaryDirectory(prefix="kprobe-tui-screens-cache-") as cache, \
            ServedFile(data, ElfSections(binary).build_id(), chunk=1024, pause_after=len(data) // 2) as server, \
            mock.patch.dict(os.environ, {"DEBUGINFOD_URLS": server.url, "DEBUGINFOD_CACHE_PATH": cache}), \
            mock.patch("kprobe_tui.debuginfo.debuginfod.PROGRESS_INTERVAL", 1e9):
        # one report only, the first (forced): a later one, with the real port and rate, could be painted over
        # the fixed one to_download shows when the machine is loaded
        yield


def builder_program() -> Path:
    return compile_program("prog", TESTS / "tui" / "c" / "builder_prog.c", "-O0", "-g")


def lab_program() -> Path:
    """The lab's program: work()'s loop line (work:3) has four addresses."""
    return compile_program("lab", TESTS / "tui" / "c" / "lab_walk.c", "-O0", "-g")


def basic_program() -> Path:
    return compile_program("basic", TESTS / "live" / "c" / "basic.c", "-O1", "-g")


@contextlib.contextmanager
def admin_and_our_probes() -> Iterator[None]:
    """On basic: a uprobe on add3() in a group that is not ours (as an administrator's perf probe
    makes it), and ours on negate(), enabled and hit OUR_HITS times. Both removed afterwards, whatever
    happens (a stale-run cleanup elsewhere may have taken ours already: kptui_4242 has no process)."""
    binary = basic_program()
    tracefs = Tracefs(locate().tracefs)
    symbols = ElfSymbols(binary)
    ours = lifetime.run_name()
    try:
        tracefs.write("uprobe_events", f"p:{ADMIN_GROUP}/add3 {binary}:0x{symbols.function('add3').file_offset:x}"
                                       " a=%di:s64 b=%si:s64\n")
        tracefs.write("uprobe_events", f"p:{ours}/negate {binary}:0x{symbols.function('negate').file_offset:x}"
                                       " x=%di:s32\n")
        tracefs.write(f"events/{ours}/negate/enable", "1\n")
        for _ in range(OUR_HITS):
            subprocess.run([str(binary)], check=True, capture_output=True)
        yield
    finally:
        events = Events(tracefs)
        for group in (ADMIN_GROUP, ours):
            events.delete_group(group)  # disabled first


# --- apps ---------------------------------------------------------------------------------------


def kernel_app(theme: str = "dark") -> KprobeTui:
    """The browser on Debian 6.1's captured data (the subtitle would otherwise name a temp dir)."""
    app = KprobeTui(open_snapshot(SNAPSHOT_61), theme=theme)
    app.sub_title = f"snapshot of {SNAPSHOT_RELEASE}"
    return app


def kernel_without_kprobes_app() -> KprobeTui:
    """Debian 6.1's captured data as a kernel built without kprobes shows it (no kprobe_events: this
    machine's own kernel is one, but the picture must not depend on the machine)."""
    sources = open_snapshot(SNAPSHOT_61)
    assert sources.tracefs is not None
    (sources.tracefs / "kprobe_events").unlink()
    app = KprobeTui(sources)
    app.sub_title = f"snapshot of {SNAPSHOT_RELEASE}, without kprobes"
    return app


def program_app(binary: Path) -> KprobeTui:
    """As ``kprobe-tui -x BINARY`` opens it."""
    return KprobeTui(locate(), BinaryCatalog(str(binary)))


# --- driving ------------------------------------------------------------------------------------


async def settled(pilot: Pilot) -> None:
    """Every worker done and its result painted (twice: a result may start another worker); toasts
    cleared: they are transient and would hide part of the screen."""
    for _ in range(2):
        await pilot.pause()
        await pilot.app.workers.wait_for_complete()
    pilot.app.clear_notifications()
    await pilot.pause()


async def until(pilot: Pilot, condition: Callable[[], object], what: str) -> None:
    """Let the app run until ``condition()`` holds (workers and the kernel answer meanwhile)."""
    for _ in range(400):
        if condition():
            return
        await pilot.pause(0.05)
    raise AssertionError(f"never happened: {what}")


async def catalog_loaded(pilot: Pilot) -> FunctionList:
    functions = pilot.app.screen.query_one(FunctionList)
    await until(pilot, lambda: functions.rows and pilot.app.catalog.details_ready, "the function list loads")
    await settled(pilot)
    return functions


async def to_functions(pilot: Pilot) -> None:
    """Filtered to tcp_v4 functions, cursor moved: the detail pane explains one."""
    await catalog_loaded(pilot)
    await pilot.press("slash", *"tcp_v4_", "escape", "down", "down")
    await settled(pilot)


async def to_source(pilot: Pilot) -> None:
    """count_ready's source, cursor on its third probeable line, its variables beside."""
    await catalog_loaded(pilot)
    await pilot.press("slash", *"count_ready", "enter")  # enter in the filter opens the highlighted function
    await settled(pilot)
    await pilot.press("n", "n")
    await settled(pilot)


async def to_source_without_dwarf(pilot: Pilot) -> None:
    """A kernel function's source without the kernel's DWARF: the BTF prototype, what to install, and
    the entry and return buttons. The debuginfo core's answer is the one it gives on a Debian 6.1
    machine without the debug package, whatever this machine has installed."""
    await catalog_loaded(pilot)
    missing = UserError(f"no debug vmlinux for kernel {SNAPSHOT_RELEASE} "
                        f"(looked in /usr/lib/debug/boot/vmlinux-{SNAPSHOT_RELEASE})",
                        KERNEL_PACKAGE_HINT.format(r=SNAPSHOT_RELEASE))
    functions = pilot.app.screen.query_one(FunctionList)
    await pilot.press("slash", *"do_sys_openat2*", "escape")  # a wildcard anchors: not __do_sys_openat2
    assert functions.current == "do_sys_openat2", functions.current
    with mock.patch.object(DebugTarget, "open", side_effect=missing):
        await pilot.press("enter")
        await settled(pilot)


async def to_download(pilot: Pilot) -> None:
    """count_ready's source view while its debug info downloads, the server stalled halfway. The server's
    port, the rate and the time left change from run to run: the picture shows that report with these fixed."""
    await catalog_loaded(pilot)
    await pilot.press("slash", *"count_ready", "enter")
    bar = pilot.app.screen.query_one(DownloadBar)
    await until(pilot, lambda: bar.report is not None and bar.report.total, "the download starts")
    first = bar.report
    build_id = first.url.rsplit("/", 2)[-2]
    bar.show(Progress(first.what, f"http://127.0.0.1:8002/buildid/{build_id}/debuginfo", first.total // 2,
                      first.total, 2.5e3))
    pilot.app.clear_notifications()
    await pilot.pause()  # not settled(): the download's worker waits on the stalled server until the app closes


async def to_builder(pilot: Pilot) -> None:
    """A uprobe on work() capturing a member through a pointer and an argument."""
    await catalog_loaded(pilot)
    await pilot.press("slash", *"work", "escape", "p")
    await settled(pilot)
    await pilot.press(*"rec->id n")
    await settled(pilot)


async def to_builder_line(pilot: Pilot) -> None:
    """A probe on work:3, a loop line of four addresses: the note before Create says it is one event."""
    await catalog_loaded(pilot)
    await pilot.press("slash", *"work", "enter")
    await settled(pilot)
    await pilot.press("n", "n", "enter")
    await settled(pilot)
    # the compile outlasts a blink (0.5 s) with nothing typed since: the Args cursor was drawn or not, by chance
    pilot.app.screen.query_one("#args", Input).cursor_blink = False


async def to_doctor(pilot: Pilot) -> None:
    """``D``: what the captured kernel allows, as ``kprobe-tui doctor`` says it."""
    await catalog_loaded(pilot)
    cache = PROGRAMS / "debuginfod-cache"  # no server, an empty cache: the same on every machine
    cache.mkdir(parents=True, exist_ok=True)
    with mock.patch.dict(os.environ, {"DEBUGINFOD_URLS": "", "DEBUGINFOD_CACHE_PATH": str(cache)}):
        await pilot.press("D")
        await settled(pilot)


async def to_builder_tree(pilot: Pilot) -> None:
    """The variables tree: rec expanded, two of its members and n ticked, id read as u8."""
    await catalog_loaded(pilot)
    await pilot.press("slash", *"work", "escape", "p")
    await settled(pilot)
    tree = pilot.app.screen.query_one(VariableTree)
    await until(pilot, lambda: tree.root.children, "the variables load")
    await pilot.press("f6", "down", "space", "up", "right")
    await until(pilot, lambda: len(tree.root.children[0].children) == 3, "rec's members load")
    await pilot.press("down", "space", "t", "down", "down", "space")
    await settled(pilot)


async def to_events(pilot: Pilot) -> None:
    """Captured uprobe events replayed (no kernel), the detail pane open on the second."""
    parser = LineParser()
    events = []
    for path in TRACE_LINES:
        events += parser.feed(path.read_text().splitlines())
    await pilot.app.push_screen(EventsScreen.replay(events + parser.flush()))
    await settled(pilot)
    await pilot.press("home", "down", "d")
    await settled(pilot)


async def to_probes(pilot: Pilot) -> None:
    """``l``: the probes panel filtered to the probes on basic (others' probes come and go): ours,
    selected, with its hits, and the administrator's."""
    await catalog_loaded(pilot)
    await pilot.press("l")
    panel = pilot.app.screen
    assert isinstance(panel, ProbesScreen)
    await pilot.press("slash", *str(PROGRAMS / "basic"), "enter")
    expected = sorted([f"{ADMIN_GROUP}/add3", f"{lifetime.run_name()}/negate"])
    await until(pilot, lambda: sorted(panel.shown) == expected, f"the panel shows {expected}")
    await settled(pilot)


def _replayed_stats(kind: str):
    """A statistics view on a fixed sample, as the Debian 6.1 guest answered (README's Answers): the
    kernel engine's reason is the one ``choose`` gives a kernel that offers everything."""
    from kprobe_tui.aggregate.offer import KernelOffer, choose
    from kprobe_tui.aggregate.result import Bucket, Entry, Result, Stats
    from kprobe_tui.aggregate.run import Sample
    from kprobe_tui.tui.screens.stats import StatsRequest, StatsScreen

    offer = KernelOffer(True, True, True, True, True)
    rates = [float(120 + 90 * ((i * 7) % 11) + (400 if i % 17 == 0 else 0)) for i in range(120)]
    if kind == "latency":
        request = StatsRequest(("vfs_read",), function="vfs_read", key=None, value="latency")
        counts = [(8, 16, 3), (16, 32, 166), (32, 64, 29), (64, 128, 25), (128, 256, 22), (256, 512, 24),
                  (512, 1024, 8), (1024, 2048, 2), (2048, 4096, 3)]
        result = Result("latency", "kernel", 0.0, 30.0, (), "usecs", (), Stats(282, 35485, 14, 2789),
                        tuple(Bucket(*bucket) for bucket in counts), unit="us")
    elif kind == "hist-stack":
        request = StatsRequest(("vfs_read", "n=count"), fields=("n",), value="n", key="stack")
        syscall = ("entry_SYSCALL_64_after_hwframe+0x6e", "do_syscall_64+0x5d")
        paths = [((*syscall, "__x64_sys_pread64+0x94", "vfs_read+0x5"), (16, 32, 7), 16),  # README's Answers
                 ((*syscall, "ksys_read+0xb7", "vfs_read+0x5"), (1, 2, 5), 1),
                 ((*syscall, "ksys_read+0x6b", "vfs_read+0x5"), (4, 8, 3), 4)]
        result = Result("hist", "kernel", 0.0, 30.0, ("stack",), "n",
                        tuple(Entry((stack,), Stats(hits, hits * value, value, value), (Bucket(*bucket),))
                              for stack, bucket, value in paths for hits in [bucket[2]]),
                        Stats(15, 129, 1, 16), tuple(Bucket(*bucket) for _, bucket, _ in sorted(paths, key=lambda p: p[1])))
    elif kind == "stack":
        request = StatsRequest(("kmem_cache_alloc",), key="stack")
        stacks = sorted(guest_stacks().items(), key=lambda item: item[1], reverse=True)
        result = Result("count", "kernel", 0.0, 30.0, ("stack",), None,
                        tuple(Entry((stack,), Stats(count)) for stack, count in stacks),
                        Stats(sum(count for _, count in stacks)), None)
    else:
        request = StatsRequest(("vfs_read",), key="comm")
        keyed = [("dd", 165), ("grep", 48), ("ls", 45), ("cat", 21), ("systemd-journal", 12), ("sshd", 9),
                 ("sh", 3), ("cron", 2), ("bash", 2), ("agetty", 1)] + [(f"kworker/{i}:1", 1) for i in range(40)]
        result = Result("count", "kernel", 0.0, 30.0, ("comm",), None,
                        tuple(Entry((comm,), Stats(count)) for comm, count in keyed),
                        Stats(sum(count for _, count in keyed)), None)
    choice = choose("auto", request.aggregation(), offer, profile_only=False, uprobes=False, filter_refusal=None)
    return StatsScreen.replay(request, Sample(result, result), rates, choice)


async def to_stats(pilot: Pilot) -> None:
    """The statistics view of vfs_read's latency (replayed: the guest's answer, no kernel)."""
    await pilot.app.push_screen(_replayed_stats("latency"))
    await settled(pilot)


async def to_stats_stack(pilot: Pilot) -> None:
    """The statistics view counting kmem_cache_alloc's calls per kernel stack (the 6.1 guest's, as bpftrace
    counted them): a row a stack, its innermost frames first."""
    await pilot.app.push_screen(_replayed_stats("stack"))
    await settled(pilot)


async def to_stats_hist_stack(pilot: Pilot) -> None:
    """The statistics view's histogram of what vfs_read is asked for, per kernel stack (the 6.1 guest's answer
    to ``hist vfs_read count --by stack``): a histogram a call path, innermost frames first."""
    await pilot.app.push_screen(_replayed_stats("hist-stack"))
    await settled(pilot)


async def to_stats_count(pilot: Pilot) -> None:
    """The statistics view counting vfs_read's calls per comm, most first, as many as fit."""
    await pilot.app.push_screen(_replayed_stats("count"))
    await settled(pilot)


def guest_graph():
    """vfs_read's calls as the 6.1 guest's own function_graph tracer printed them (tests/fixtures/graph)."""
    from kprobe_tui.stream.callgraph import GraphAnswer, GraphReader

    reader = GraphReader()
    calls = reader.feed((Path(__file__).parents[1] / "fixtures" / "graph" / "vfs_read-6.1.txt").read_text().splitlines())
    return GraphAnswer(calls, "deadline", reader.orphans, reader.open_calls, reader.lost)


def guest_graph_errors():
    """do_sys_openat2's calls with their return values, as the 6.12 guest printed them with ``graph --retval``'s
    return probes (tests/fixtures/graph): four failing opens of a missing file and one that succeeds."""
    import json

    from kprobe_tui.stream.callgraph import GraphAnswer, GraphReader, ReturnsReport

    lines = (Path(__file__).parents[1] / "fixtures" / "graph" / "do_sys_openat2-retval-6.12.txt").read_text().splitlines()
    probes = json.loads(next(line[3:] for line in lines if line.startswith("#R ")))
    reader = GraphReader(returns=probes["functions"])
    calls = reader.feed(lines) + reader.flush()
    report = ReturnsReport(list(probes["functions"].values()), probes["void"], probes["refused"], 0)
    return GraphAnswer(calls, "done", reader.orphans, reader.open_calls, reader.lost, report)


async def to_graph_errors(pilot: Pilot) -> None:
    """The call graph of do_sys_openat2 with return values (e), replayed from the 6.12 guest's trace: where each
    failing open's -ENOENT came from."""
    from kprobe_tui.tui.screens.calltree import CallGraphScreen

    await pilot.app.push_screen(CallGraphScreen("do_sys_openat2", None, guest_graph_errors()))
    await settled(pilot)
    tree = pilot.app.screen.query_one(Tree)
    [opens] = [node for node in tree.root.children[0].children if node.data == "do_filp_open"]
    opens.expand()  # path_openat under it: where the errors came from
    await settled(pilot)
    tree.move_cursor(opens.children[0])
    await settled(pilot)


async def to_graph(pilot: Pilot) -> None:
    """The call graph of vfs_read, replayed from the guest's trace."""
    from kprobe_tui.tui.screens.calltree import CallGraphScreen

    await pilot.app.push_screen(CallGraphScreen("vfs_read", None, guest_graph()))
    await settled(pilot)


def guest_stacks() -> dict[tuple[str, ...], int]:
    """kmem_cache_alloc's kernel stacks as bpftrace counted them in the 6.1 guest (tests/fixtures/stacks)."""
    from kprobe_tui.stream.flame import parse_folded

    folded = TESTS / "fixtures" / "stacks" / "kmem_cache_alloc-6.1.folded"
    return parse_folded(folded.read_text(), folded.name)


async def to_flame(pilot: Pilot) -> None:
    """The flame graph of the guest's stacks, the cursor three calls down the widest path."""
    from kprobe_tui.tui.screens.flame import FlameScreen

    await pilot.app.push_screen(FlameScreen(guest_stacks(), "count kmem_cache_alloc · by stack · since start"))
    await pilot.press("down", "down", "down")
    await settled(pilot)


async def to_flame_search(pilot: Pilot) -> None:
    """Zoomed into the system calls, the frames of the 9p client marked by a search."""
    await to_flame(pilot)
    await pilot.press("up", "enter", "slash", *"p9_client", "enter")
    await settled(pilot)


async def to_help(pilot: Pilot) -> None:
    """``?`` on the function browser."""
    await catalog_loaded(pilot)
    await pilot.press("question_mark")
    await settled(pilot)


STATES = [
    State("functions", kernel_app, to_functions),
    State("source", lambda: program_app(probed_program()), to_source),
    State("source-btf", kernel_app, to_source_without_dwarf),
    State("source-download", lambda: program_app(PROGRAMS / "probed-stripped"), to_download, server=stalled_debuginfod),
    State("builder", lambda: program_app(builder_program()), to_builder),
    State("builder-tree", lambda: program_app(builder_program()), to_builder_tree),
    State("builder-line", lambda: program_app(lab_program()), to_builder_line),
    State("events", kernel_app, to_events),
    State("probes", lambda: program_app(basic_program()), to_probes, kernel=admin_and_our_probes),
    State("help", kernel_app, to_help),
    State("doctor", kernel_app, to_doctor),
    State("functions-no-kprobes", kernel_without_kprobes_app, to_functions),
    State("stats", kernel_app, to_stats),
    State("stats-count", kernel_app, to_stats_count),
    State("stats-stack", kernel_app, to_stats_stack),
    State("stats-hist-stack", kernel_app, to_stats_hist_stack),
    State("graph", kernel_app, to_graph),
    State("graph-errors", kernel_app, to_graph_errors),
    State("flame", kernel_app, to_flame),
    State("flame-search", kernel_app, to_flame_search),
    *(State(f"theme-{theme}", lambda theme=theme: kernel_app(theme), to_functions, sizes=((80, 24),))
      for theme in ("light", "high-contrast", "monochrome")),
]


def shots() -> list[tuple[State, tuple[int, int]]]:
    """Every (state, size) pair: one snapshot test and one screenshot each."""
    return [(state, size) for state in STATES for size in state.sizes]


def shot_name(state: State, size: tuple[int, int]) -> str:
    return f"{state.name}-{size[0]}x{size[1]}"
