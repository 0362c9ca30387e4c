"""The probe builder driven through Pilot on a C program compiled here, with real uprobes.

The app is opened as ``kprobe-tui -x BIN`` opens it; the probes the builder creates must appear
in this run's group, fire when the program runs, and be gone when the run ends.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from textual.app import App

from kprobe_tui.cli import build_parser
from kprobe_tui.cli import main as cli_main
from kprobe_tui.kernel import lifetime
from kprobe_tui.kernel.events import Events
from kprobe_tui.kernel.sources import locate
from kprobe_tui.kernel.tracefs import Tracefs
from kprobe_tui.probes import guard
from kprobe_tui.probes.binary import BinaryCatalog
from kprobe_tui.probes.compile import compile_spec
from kprobe_tui.probes.render import bpftrace_oneliner, perf_command
from kprobe_tui.probes.spec import DEFAULT_PERSISTENT_GROUP, parse_spec
from kprobe_tui.tui.app import KprobeTui
from kprobe_tui.tui.screens.builder import ProbeBuilderScreen
from kprobe_tui.tui.screens.events import EventsScreen
from kprobe_tui.tui.widgets.function_list import FunctionList
from kprobe_tui.tui.widgets.probe_preview import ProbePreview

C_PROGRAM = Path(__file__).parent / "c" / "builder_prog.c"
# A fixed path: the snapshot shows it, and uprobe_events lines are told apart by it.
FIXED_DIR = Path("/tmp/kprobe-tui-builder-test")


@pytest.fixture(scope="module")
def prog() -> Path:
    FIXED_DIR.mkdir(exist_ok=True)
    out = FIXED_DIR / "prog"
    subprocess.run(["gcc", "-O0", "-g", "-o", str(out), str(C_PROGRAM)], check=True)
    return out


def ours(root: Path, binary: Path) -> list[str]:
    """uprobe_events lines on our binary (other engineers' tests add their own meanwhile)."""
    return [line for line in (root / "uprobe_events").read_text().splitlines() if str(binary) in line]


def app_for(binary: Path) -> KprobeTui:
    """The app as ``kprobe-tui -x BINARY`` builds it (cli.main -> run_app)."""
    args = build_parser().parse_args(["-x", str(binary)])
    return KprobeTui(locate(), BinaryCatalog(args.exec_binary))


async def open_builder(pilot, function: str) -> ProbeBuilderScreen:
    functions = pilot.app.screen.query_one(FunctionList)
    for _ in range(200):
        if functions.rows:
            break
        await pilot.pause(0.05)
    await pilot.press("slash", *function, "enter")
    assert functions.current == function
    await pilot.press("p")
    builder = pilot.app.screen
    assert isinstance(builder, ProbeBuilderScreen) and builder.function == function
    await settled(pilot)
    return builder


async def settled(pilot) -> None:
    """Wait for the debounced recompile to land in the preview."""
    await pilot.pause()  # the Changed messages start the workers
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


def expected(binary: Path, *words: str, user_filter: str = "", taken=()):
    """The spec and probes the builder should show, made directly from the cores."""
    group = lifetime.run_name()
    spec = parse_spec(list(words), binary=str(binary), group=group)
    spec = replace(spec, filter=guard.combine_filters(user_filter, guard.advise(spec).filter))
    return spec, compile_spec(spec, group, taken)


async def test_preview_equals_the_compiler_and_the_renderers(prog):
    app = app_for(prog)
    async with app.run_test(size=(80, 24)) as pilot:
        builder = await open_builder(pilot, "work")
        assert builder.kinds == ["entry", "return", "line", "offset"]  # no fprobes on user binaries
        await pilot.press(*"rec->id n rec->name:string")
        await pilot.click("#filter")
        await pilot.press(*"n > 1")
        await settled(pilot)
        spec, probes = expected(prog, "work", "rec->id", "n", "rec->name:string", user_filter="n > 1")
        preview = builder.query_one(ProbePreview).preview
        assert preview.error is None
        assert [p.definition() for p in preview.probes] == [p.definition() for p in probes]
        rows = dict((label, text) for label, text in preview.lines() if label)
        assert rows["tracefs"] == f"echo '{probes[0].definition()}' >> /sys/kernel/tracing/uprobe_events"
        assert rows["perf"] == perf_command(spec, probes[0].group, probes[0].event)
        assert rows["bpftrace"] == bpftrace_oneliner(spec, probes[0])
        assert spec.filter == f"(n > 1) && (common_pid != {os.getpid()})"  # our own PID is always left out
        assert ("", f"echo '{spec.filter}' > /sys/kernel/tracing/events/{probes[0].group}/work/filter") in preview.lines()

        # the kind selector: a return probe with $retval, then line 3 of work with a local
        builder.query_one("#kind").value = "return"
        await pilot.click("#args")
        await pilot.press("ctrl+a", "ctrl+k", *"$retval")
        await settled(pilot)
        assert builder.preview.probes[0].definition() == expected(prog, "work%return", "$retval", user_filter="n > 1")[1][0].definition()
        builder.query_one("#kind").value = "line"
        builder.query_one("#number").value = "4"
        builder.query_one("#args").value = "sum"
        await settled(pilot)
        assert builder.preview.probes[0].definition() == expected(prog, "work:4", "sum", user_filter="n > 1")[1][0].definition()


@pytest.mark.live
async def test_create_makes_a_run_scoped_uprobe_that_fires_and_goes_with_the_run(prog, tracefs_root):
    before = ours(tracefs_root, prog)
    top = Tracefs(tracefs_root)
    group = lifetime.run_name()
    created: dict[int, list[str]] = {}  # the hook sees the message at each node it bubbles through

    def hook(message) -> None:
        if isinstance(message, ProbeBuilderScreen.Created):
            created[id(message)] = message.events

    try:
        app = app_for(prog)
        async with app.run_test(size=(80, 24), message_hook=hook) as pilot:
            builder = await open_builder(pilot, "work")
            await pilot.press(*"rec->id n")
            await settled(pilot)
            await pilot.press("ctrl+s")
            await pilot.pause()
            assert list(created.values()) == [[f"{group}/work"]]
            [line] = [line for line in ours(tracefs_root, prog) if line not in before]
            assert line.startswith(f"p:{group}/work ")
            # Not enabled in the shared top-level buffer: the events screen enables it in our instance,
            # under the filter it was defined with (the feedback guard's own-PID exclusion).
            assert top.read(f"events/{group}/work/enable").strip() == "0"
            assert top.read(f"events/{group}/work/filter").strip() == f"common_pid != {os.getpid()}"
            assert "created" in str(builder.query_one("#status").render())
            events_screen = app.screen
            assert isinstance(events_screen, EventsScreen)
            instance_dir = f"instances/{group}/events/{group}/work"
            assert top.read(f"{instance_dir}/enable").strip() == "1"
            others = [tid for tid in events_screen.session.instance.excluded_threads if tid != os.getpid()]
            assert events_screen.session.reader.native_id in others
            assert top.read(f"{instance_dir}/filter").strip() == " && ".join(
                [f"(common_pid != {os.getpid()})"] + [f"common_pid != {tid}" for tid in others])
            subprocess.run([str(prog), "3"], check=True, capture_output=True)
            for _ in range(100):
                if len(events_screen.store) >= 3:
                    break
                await pilot.pause(0.05)
            fired = [re.search(r"id=(\d+) n=(\d+)", event.body).groups() for event in events_screen.store.view_rows(0, 3)]
            assert fired == [("7", "1"), ("8", "2"), ("9", "3")]  # as main() calls it
            await pilot.press("escape")  # back from the events screen to the builder
            assert app.screen is builder
            await pilot.press("escape")
            assert not isinstance(app.screen, ProbeBuilderScreen)
        assert [line for line in ours(tracefs_root, prog) if line not in before]  # run-scoped: alive until the run ends
    finally:
        lifetime.undo.run_all()  # what the end of the process does (atexit, SIGTERM, SIGHUP)
    assert ours(tracefs_root, prog) == before


@pytest.mark.live
async def test_pin_keeps_the_probe_in_the_persistent_group(prog, tracefs_root):
    before = ours(tracefs_root, prog)
    events = Events(Tracefs(tracefs_root))
    try:
        app = app_for(prog)
        async with app.run_test(size=(80, 24)) as pilot:
            builder = await open_builder(pilot, "helper")
            await pilot.press("ctrl+g")
            await pilot.pause()
            [name] = builder.created
            assert name.startswith(f"{DEFAULT_PERSISTENT_GROUP}/helper")
        lifetime.undo.run_all()  # the run ends: a pinned probe stays
        [line] = [line for line in ours(tracefs_root, prog) if line not in before]
        assert line.startswith(f"p:{name} ")
    finally:
        for event in events.list():
            if event.group == DEFAULT_PERSISTENT_GROUP and str(prog) in event.definition:
                events.delete(event)
    assert ours(tracefs_root, prog) == before


@pytest.mark.live
async def test_bad_argument_names_the_token_and_creates_nothing(prog, tracefs_root):
    before = ours(tracefs_root, prog)
    app = app_for(prog)
    async with app.run_test(size=(80, 24)) as pilot:
        builder = await open_builder(pilot, "work")
        await pilot.press(*"rec->bogus")
        await settled(pilot)
        preview = builder.query_one(ProbePreview).preview
        assert preview.error is not None and "'bogus'" in preview.error.message
        assert preview.lines()[0] == ("error", "rec->bogus: struct rec has no member 'bogus'")
        assert ("hint", "its members: flags, id, name") in preview.lines()
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert str(builder.query_one("#status").render()).startswith("not created: rec->bogus")
        await pilot.press("ctrl+a", "ctrl+k", *"n 'x")  # an unclosed quote is an error too, not a traceback
        await settled(pilot)
        assert builder.preview.error.message.startswith("\"n 'x\": No closing quotation")
    assert ours(tracefs_root, prog) == before


async def test_prefilled_from_a_source_line_and_variable(prog):
    class Host(App):
        def on_mount(self) -> None:
            self.push_screen(ProbeBuilderScreen("work", binary=str(prog), sources=locate(), line=4, variable="sum"))

    async with Host().run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        builder = pilot.app.screen
        assert builder.query_one("#kind").value == "line" and builder.query_one("#number").value == "4"
        assert builder.preview.probes[0].definition() == expected(prog, "work:4", "sum")[1][0].definition()


async def test_ssh_output_path_warning_needs_a_second_confirm(monkeypatch):
    monkeypatch.setenv("SSH_CONNECTION", "192.0.2.1 50000 192.0.2.2 22")

    class Host(App):
        def on_mount(self) -> None:
            self.push_screen(ProbeBuilderScreen("tcp_sendmsg", sources=locate()))

    async with Host().run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        builder = pilot.app.screen
        readme = (locate().tracefs / "README").read_text()
        assert ("fprobe" in builder.kinds) == ("f[:[<group>/][<event>]]" in readme)  # offered when the kernel has them
        warnings = [text for label, text in builder.preview.lines() if label == "warning"]
        assert warnings and "tcp_sendmsg is on the path your terminal output takes over SSH" in warnings[0]
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert "press Create again" in str(builder.query_one("#status").render())
        assert builder.created == []
        try:
            await pilot.press("ctrl+s")  # confirmed: now it goes to the kernel
            await pilot.pause()
            if (locate().tracefs / "kprobe_events").exists():
                assert builder.created == [f"{lifetime.run_name()}/tcp_sendmsg"]
            else:
                assert "this kernel has no kprobe_events" in str(builder.query_one("#status").render())
        finally:
            lifetime.undo.run_all()


def test_cli_refuses_a_missing_binary_with_a_message(capsys):
    assert cli_main(["-x", "/nonexistent/prog"]) == 2
    err = capsys.readouterr().err
    assert "'/nonexistent/prog': no such file" in err and "Traceback" not in err


def test_builder_at_80x24_matches_snapshot(prog, snap_compare, monkeypatch):
    """The builder on work() with two arguments; the PID (group name, own-PID filter) is fixed."""
    monkeypatch.setattr(os, "getpid", lambda: 4242)

    async def interact(pilot):
        await open_builder(pilot, "work")
        await pilot.press(*"rec->id n")
        await settled(pilot)

    app = app_for(prog)
    assert snap_compare(app, terminal_size=(80, 24), run_before=interact)


async def test_p_on_a_kernel_function_builds_a_kprobe_from_btf():
    sources = locate()
    app = KprobeTui(sources)
    async with app.run_test(size=(80, 24)) as pilot:
        builder = await open_builder(pilot, "vfs_read")
        assert str(builder.query_one("#target").render()) == "kernel  vfs_read"
        await pilot.press(*"count buf")
        await settled(pilot)
        group = lifetime.run_name()
        spec = parse_spec(["vfs_read", "count", "buf"], group=group)
        spec = replace(spec, filter=guard.advise(spec).filter)
        readme = (sources.tracefs / "README").read_text()
        [probe] = compile_spec(spec, group, readme=readme, btf_path=sources.btf_vmlinux)
        assert [p.definition() for p in builder.preview.probes] == [probe.definition()]
        assert probe.control_file == "kprobe_events" and probe.definition().startswith(f"p:{group}/vfs_read vfs_read+0 ")
