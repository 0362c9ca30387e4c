"""The probe builder driven through Pilot on a C program compiled here, with real uprobes.

The app is opened as ``kprobe-tui -x BIN`` opens it; the probes the builder creates must appear
in this run's group, fire when the program runs, and be gone when the run ends.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from rich.style import Style
from textual.app import App
from textual.geometry import Region
from textual.widgets import Button, Input

from kprobe_tui import blocking
from kprobe_tui.cli import build_parser
from kprobe_tui.cli import main as cli_main
from kprobe_tui.kernel import lifetime
from kprobe_tui.kernel.events import Events
from kprobe_tui.kernel.snapshot import open_snapshot
from kprobe_tui.kernel.sources import locate
from kprobe_tui.kernel.tracefs import Tracefs
from kprobe_tui.probes import guard
from kprobe_tui.probes.binary import BinaryCatalog
from kprobe_tui.probes.compile import compile_spec
from kprobe_tui.probes.render import bpftrace_oneliner, perf_command
from kprobe_tui.probes.spec import DEFAULT_PERSISTENT_GROUP, parse_spec
from kprobe_tui.probes.symbols import ElfSymbols
from kprobe_tui.tui.app import KprobeTui
from kprobe_tui.tui.navigation import ShowEvents
from kprobe_tui.tui.screens.builder import ProbeBuilderScreen
from kprobe_tui.tui.screens.events import EventsScreen
from kprobe_tui.tui.widgets.function_list import FunctionList
from kprobe_tui.tui.widgets.probe_preview import ProbePreview
from kprobe_tui.tui.widgets.variable_tree import VariableTree
from tests.tui.states import SNAPSHOT_61, until
from tests.tui.uprobes import uprobes_on

C_PROGRAM = Path(__file__).parent / "c" / "builder_prog.c"
# A path of its own: uprobe_events lines are told apart by it.
FIXED_DIR = Path("/tmp/kprobe-tui-builder-test")


@pytest.fixture(scope="module")
def prog() -> Path:
    FIXED_DIR.mkdir(exist_ok=True)
    out = FIXED_DIR / "prog"
    subprocess.run(["gcc", "-O0", "-g", "-o", str(out), str(C_PROGRAM)], check=True)
    return out



def app_for(binary: Path) -> KprobeTui:
    """The app as ``kprobe-tui -x BINARY`` builds it (cli.main -> run_app)."""
    args = build_parser().parse_args(["-x", str(binary)])
    return KprobeTui(locate(), BinaryCatalog(args.binary))


async def open_builder(pilot, function: str) -> ProbeBuilderScreen:
    functions = pilot.app.screen.query_one(FunctionList)
    for _ in range(200):
        if functions.rows:
            break
        await pilot.pause(0.05)
    await pilot.press("slash", *function, "escape")
    assert functions.current == function
    await pilot.press("p")
    builder = pilot.app.screen
    assert isinstance(builder, ProbeBuilderScreen) and builder.function == function
    await settled(pilot)
    return builder


async def settled(pilot) -> None:
    """Wait for the debounced recompile (or Create) to land, and for what its answer started."""
    for _ in range(5):
        await pilot.pause()  # the Changed messages start the workers
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        if not any(worker.is_running for worker in pilot.app.workers):
            return


def expected(binary: Path, *words: str, user_filter: str = "", taken=()):
    """The spec and probes the builder should show, made directly from the cores (by the test, on the
    app's thread: knowingly)."""
    group = lifetime.run_name()
    spec = parse_spec(list(words), binary=str(binary), group=group)
    spec = replace(spec, filter=guard.combine_filters(user_filter, guard.advise(spec).filter))
    with blocking.knowingly():
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
        rows = {label: text for label, text in preview.lines() if label}
        assert rows["tracefs"] == f"echo '{probes[0].definition()}' >> /sys/kernel/tracing/uprobe_events"
        assert rows["perf"] == perf_command(spec, probes[0].group, probes[0].event)
        assert rows["bpftrace"] == bpftrace_oneliner(spec, probes[:1])
        assert spec.filter == f"(n > 1) && (common_pid != {os.getpid()})"  # our own PID is always left out
        assert ("", f"echo '{spec.filter}' > /sys/kernel/tracing/events/{probes[0].group}/work/filter") in preview.lines()

        # the kind selector: a return probe with $retval, then line 3 of work with a local
        # (the filter names fields of the event: n is no field of these, so it changes with them)
        builder.query_one("#kind").value = "return"
        builder.query_one("#filter").value = "retval > 1"
        await pilot.click("#args")
        await pilot.press("ctrl+a", "ctrl+k", *"$retval")
        await settled(pilot)
        assert builder.preview.probes[0].definition() == expected(prog, "work%return", "$retval", user_filter="retval > 1")[1][0].definition()
        builder.query_one("#kind").value = "line"
        builder.query_one("#number").value = "4"
        builder.query_one("#args").value = "sum"
        builder.query_one("#filter").value = "sum > 1"
        await settled(pilot)
        assert builder.preview.probes[0].definition() == expected(prog, "work:4", "sum", user_filter="sum > 1")[1][0].definition()


@pytest.mark.live
async def test_create_makes_a_run_scoped_uprobe_that_fires_and_goes_with_the_run(prog, tracefs_root):
    before = uprobes_on(tracefs_root, prog)
    top = Tracefs(tracefs_root)
    group = lifetime.run_name()
    created: dict[int, list[str]] = {}  # the hook sees the message at each node it bubbles through

    def hook(message) -> None:
        if isinstance(message, ShowEvents):
            created[id(message)] = message.patterns

    try:
        app = app_for(prog)
        async with app.run_test(size=(80, 24), message_hook=hook) as pilot:
            builder = await open_builder(pilot, "work")
            await pilot.press(*"rec->id n")
            await settled(pilot)
            await pilot.press("ctrl+s")
            await until(pilot, lambda: created, "Create answers (it runs in a worker)")
            await pilot.pause()
            assert list(created.values()) == [[f"{group}/work"]]
            [line] = [line for line in uprobes_on(tracefs_root, prog) if line not in before]
            assert line.startswith(f"p:{group}/work ")
            # Not enabled in the shared top-level buffer: the events screen enables it in our instance,
            # under the filter it was defined with (the feedback guard's own-PID exclusion).
            assert top.read(f"events/{group}/work/enable").strip() == "0"
            assert top.read(f"events/{group}/work/filter").strip() == f"common_pid != {os.getpid()}"
            assert "created" in str(builder.query_one("#status").render())
            events_screen = app.screen
            assert isinstance(events_screen, EventsScreen)
            await until(pilot, lambda: events_screen.session is not None, "the events screen records")
            instance_dir = f"instances/{group}/events/{group}/work"
            assert top.read(f"{instance_dir}/enable").strip() == "1"
            others = [tid for tid in events_screen.session.instance.excluded_threads if tid != os.getpid()]
            assert events_screen.session.reader.native_id in others
            assert top.read(f"{instance_dir}/filter").strip() == " && ".join(
                [f"(common_pid != {os.getpid()})"] + [f"common_pid != {tid}" for tid in others])
            await asyncio.to_thread(subprocess.run, [str(prog), "3"], check=True, capture_output=True)
            for _ in range(100):
                if len(events_screen.store) >= 3:
                    break
                await pilot.pause(0.05)
            fired = [re.search(r"id=(\d+) n=(\d+)", event.body).groups() for event in events_screen.store.view_rows(0, 3)]
            assert fired == [("7", "1"), ("8", "2"), ("9", "3")]  # as main() calls it
            await pilot.press("escape")  # back from the events screen to the builder
            assert app.screen is builder and isinstance(app.focused, Input)
            await pilot.press("escape")  # out of the field: letters are keys again
            assert app.screen is builder and isinstance(app.focused, Button)
            await pilot.press("escape")
            assert not isinstance(app.screen, ProbeBuilderScreen)
        assert [line for line in uprobes_on(tracefs_root, prog) if line not in before]  # run-scoped: alive until the run ends
    finally:
        lifetime.undo.run_all()  # what the end of the process does (atexit, SIGTERM, SIGHUP)
    assert uprobes_on(tracefs_root, prog) == before


@pytest.mark.live
async def test_create_escape_create_makes_nothing_twice(prog, tracefs_root):
    """^s, Esc (back from the events screen), ^s: the same probes are in the kernel already, so the second
    Create makes nothing and says which event has them; a changed argument is a new probe."""
    before = uprobes_on(tracefs_root, prog)
    try:
        app = app_for(prog)
        async with app.run_test(size=(80, 24)) as pilot:
            builder = await open_builder(pilot, "work")
            await pilot.press(*"n")
            await settled(pilot)
            await pilot.press("ctrl+s")
            await until(pilot, lambda: isinstance(app.screen, EventsScreen), "Create shows the events")
            made = [line for line in uprobes_on(tracefs_root, prog) if line not in before]
            await pilot.press("escape")
            assert app.screen is builder and builder.created == [f"{lifetime.run_name()}/work"]
            await settled(pilot)
            await pilot.press("ctrl+s")
            status = builder.query_one("#status")
            await until(pilot, lambda: "already probes this" in str(status.render()), "the second Create answers")
            assert f"{lifetime.run_name()}/work already probes this" in str(status.render())
            assert app.screen is builder and len(builder.created) == 1
            assert [line for line in uprobes_on(tracefs_root, prog) if line not in before] == made
            await pilot.press(*" rec->id")  # another argument: another probe
            await settled(pilot)
            await pilot.press("ctrl+s")
            await until(pilot, lambda: len(builder.created) == 2, "a different probe is made")
    finally:
        lifetime.undo.run_all()
    assert uprobes_on(tracefs_root, prog) == before


async def test_tab_from_args_reaches_the_filter_and_escape_goes_one_step_back(prog):
    """Tab goes from what is captured to what is kept; Escape leaves a field for the buttons, where a letter
    is a key again (not typed into Args), and a second Escape goes back to where the builder came from."""
    app = app_for(prog)
    async with app.run_test(size=(80, 24)) as pilot:
        builder = await open_builder(pilot, "work")
        assert builder.focused is builder.query_one("#args")
        await pilot.press("tab")
        assert builder.focused is builder.query_one("#filter")
        await pilot.press("shift+tab", "escape", "x")
        assert isinstance(builder.focused, Button) and app.screen is builder
        assert builder.query_one("#args", Input).value == ""
        await pilot.press("escape")
        assert app.screen.query(FunctionList)  # back on the list the builder was opened from


def symtab_address(binary: Path, function: str, source_file: str) -> int:
    """Where the symbol table puts ``function`` of ``source_file``: a static function is listed after its
    file's FILE symbol (readelf, an oracle without DWARF)."""
    out = subprocess.run(["readelf", "-W", "-s", str(binary)], check=True, capture_output=True, text=True).stdout
    in_file = None
    for value, kind, name in re.findall(r"^\s*\d+: ([0-9a-f]+)\s+\S+ (\w+)\s+\w+\s+\w+\s+\S+ (\S+)$", out, re.M):
        in_file = name if kind == "FILE" else in_file
        if kind == "FUNC" and name == function and in_file == source_file:
            return int(value, 16)
    raise AssertionError(f"no {function} of {source_file} in {binary}'s symbol table")


@pytest.mark.live
async def test_a_static_function_of_two_files_is_probed_in_the_file_chosen_in_the_list(tmp_path, tracefs_root):
    """twin is static in two files: the list has a row per file (FUNC@FILE, as perf takes it), whose builder
    makes one probe, on that file's twin (the builder of the bare name can only say it is ambiguous)."""
    c_dir = Path(__file__).parent / "c"
    binary = tmp_path / "twins"
    subprocess.run(["gcc", "-O0", "-g", "-o", str(binary), str(c_dir / "catalog_main.c"), str(c_dir / "catalog_other.c")],
                   check=True)
    offset = ElfSymbols(binary).file_offset(symtab_address(binary, "twin", "catalog_other.c"))
    try:
        app = app_for(binary)
        async with app.run_test(size=(80, 24)) as pilot:
            builder = await open_builder(pilot, "twin@catalog_other.c")
            assert builder.preview is not None and "-a twin=twin@catalog_other.c" in builder.preview.copy_text("perf")
            assert "its twin may be another file's" in builder.preview.copy_text("bpftrace")  # it has no FUNC@FILE
            await pilot.press("ctrl+s")
            await until(pilot, lambda: isinstance(app.screen, EventsScreen), "Create shows the events")
            [made] = uprobes_on(tracefs_root, binary)
            assert made.endswith(f"{binary}:0x{offset:016x}"), made
    finally:
        lifetime.undo.run_all()
    assert uprobes_on(tracefs_root, binary) == []


@pytest.mark.live
async def test_pin_keeps_the_probe_in_the_persistent_group(prog, tracefs_root):
    before = uprobes_on(tracefs_root, prog)
    events = Events(Tracefs(tracefs_root))
    try:
        app = app_for(prog)
        async with app.run_test(size=(80, 24)) as pilot:
            builder = await open_builder(pilot, "helper")
            await pilot.press("ctrl+g")
            await settled(pilot)  # Create runs in a worker
            [name] = builder.created
            assert name.startswith(f"{DEFAULT_PERSISTENT_GROUP}/helper")
        lifetime.undo.run_all()  # the run ends: a pinned probe stays
        [line] = [line for line in uprobes_on(tracefs_root, prog) if line not in before]
        assert line.startswith(f"p:{name} ")
    finally:
        for event in events.list():
            if event.group == DEFAULT_PERSISTENT_GROUP and str(prog) in event.definition:
                events.delete(event)
    assert uprobes_on(tracefs_root, prog) == before


@pytest.mark.live
async def test_bad_argument_names_the_token_and_creates_nothing(prog, tracefs_root):
    before = uprobes_on(tracefs_root, prog)
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
        await settled(pilot)  # Create runs in a worker
        assert str(builder.query_one("#status").render()).startswith("not created: rec->bogus")
        await pilot.press("ctrl+a", "ctrl+k", *"n 'x")  # an unclosed quote is an error too, not a traceback
        await settled(pilot)
        assert builder.preview.error.message.startswith("\"n 'x\": No closing quotation")
    assert uprobes_on(tracefs_root, prog) == before


async def test_prefilled_from_a_source_line_and_variable(prog):
    class Host(App):
        def on_mount(self) -> None:
            self.push_screen(ProbeBuilderScreen("work", binary=str(prog), sources=locate(), line=4, variable="sum"))

    async with Host().run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        builder = pilot.app.screen
        assert builder.query_one("#kind").value == "line" and builder.query_one("#number").value == "4"
        assert builder.preview.probes[0].definition() == expected(prog, "work:4", "sum")[1][0].definition()
        tree = builder.query_one("#variables", VariableTree)
        await until(pilot, lambda: tree.root.children, "the variables at line 4 load")
        _, node = row(tree, "sum")
        assert tree.ticked == {"sum": None}  # the variable it was opened for is ticked
        assert str(tree.render_label(node, Style(), Style())).startswith("[x]   sum")


async def test_ssh_output_path_warning_needs_a_second_confirm(monkeypatch):
    monkeypatch.setenv("SSH_CONNECTION", "192.0.2.1 50000 192.0.2.2 22")
    sources = locate()
    if not (sources.tracefs / "kprobe_events").exists():
        pytest.skip("this kernel has no kprobes: test_a_kernel_without_kprobes_is_refused_as_the_builder_opens")

    class Host(App):
        def on_mount(self) -> None:
            self.push_screen(ProbeBuilderScreen("tcp_sendmsg", sources=sources))

    async with Host().run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        builder = pilot.app.screen
        readme = (sources.tracefs / "README").read_text()
        assert ("fprobe" in builder.kinds) == ("f[:[<group>/][<event>]]" in readme)  # offered when the kernel has them
        warnings = [text for label, text in builder.preview.lines() if label == "warning"]
        assert warnings and "tcp_sendmsg is on the path your terminal output takes over SSH" in warnings[0]
        await pilot.press("ctrl+s")
        await settled(pilot)  # Create runs in a worker
        assert "press Create again" in str(builder.query_one("#status").render())
        assert builder.created == []
        try:
            await pilot.press("ctrl+s")  # confirmed: now it goes to the kernel
            await settled(pilot)  # Create runs in a worker
            assert builder.created == [f"{lifetime.run_name()}/tcp_sendmsg"]
        finally:
            lifetime.undo.run_all()


async def test_a_kernel_without_kprobes_is_refused_as_the_builder_opens(tracefs_root):
    """This machine's kernel has no kprobes: every function says so, p says why instead of opening the
    builder, and a builder opened all the same shows the refusal before Create, and Create makes nothing."""
    sources = locate()
    if (sources.tracefs / "kprobe_events").exists():
        pytest.skip("this kernel has kprobes")
    before = (tracefs_root / "dynamic_events").read_text()
    app = KprobeTui(sources)
    async with app.run_test(size=(80, 24)) as pilot:
        functions = pilot.app.screen.query_one(FunctionList)
        await until(pilot, lambda: functions.rows, "the function list loads")
        await pilot.press("slash", *"vfs_read", "escape", "p")
        assert not isinstance(app.screen, ProbeBuilderScreen)
        assert any("built without kprobes" in str(toast.message) and "D: the doctor" in str(toast.message)
                   for toast in app._notifications)
        app.push_screen(ProbeBuilderScreen("vfs_read", sources=sources))
        await settled(pilot)
        builder = app.screen
        assert builder.preview.error is not None and "built without kprobes" in builder.preview.error.message
        assert "D in the TUI" in builder.preview.error.hint
        await pilot.press("ctrl+s")
        await settled(pilot)
        assert str(builder.query_one("#status").render()).startswith("not created: 'vfs_read': this kernel was built")
        assert builder.created == [] and (tracefs_root / "dynamic_events").read_text() == before


def test_cli_refuses_a_missing_binary_with_a_message(capsys):
    assert cli_main(["-x", "/nonexistent/prog"]) == 2
    err = capsys.readouterr().err
    assert "/nonexistent/prog: no such file" in err and "Traceback" not in err


async def test_p_on_a_kernel_function_builds_a_kprobe_from_btf():
    """On Debian 6.1 (its snapshot: this machine's kernel may have no kprobes)."""
    sources = open_snapshot(SNAPSHOT_61)
    app = KprobeTui(sources)
    async with app.run_test(size=(80, 24)) as pilot:
        builder = await open_builder(pilot, "vfs_read")
        assert str(builder.query_one("#target").render()) == "kernel  vfs_read"
        await pilot.press(*"count buf")
        await settled(pilot)
        group = builder.request().group  # a snapshot is read-only: the commands are for its machine's kprobe_tui group
        spec = parse_spec(["vfs_read", "count", "buf"], group=group)
        spec = replace(spec, filter=guard.advise(spec).filter)
        readme = (sources.tracefs / "README").read_text()
        with blocking.knowingly():
            [probe] = compile_spec(spec, group, readme=readme, btf_path=sources.btf_vmlinux)
        assert [p.definition() for p in builder.preview.probes] == [probe.definition()]
        assert probe.control_file == "kprobe_events" and probe.definition().startswith(f"p:{group}/vfs_read vfs_read+0 ")
        # no DWARF for the kernel here: the tree is the BTF prototype, and typing ticked what it names
        tree = builder.query_one(VariableTree)
        await until(pilot, lambda: tree.root.children, "the BTF parameters load")
        assert [node.data.name for node in tree.root.children] == ["file", "buf", "count", "pos"]
        assert row(tree, "file")[1].data.where == "register %di" and set(tree.ticked) == {"count", "buf"}


# --- the variables tree, type overrides, copy, completion, inline errors, lab mode ---------------


def row(tree: VariableTree, expression: str):
    """The tree line whose node captures ``expression``; its label starts with the variable's name."""
    for line in range(tree.last_line + 1):
        node = tree.get_node_at_line(line)
        if node is not None and node.data is not None and node.data.expression == expression:
            assert str(node.label).startswith(node.data.name)
            return line, node
    raise AssertionError(f"no row for {expression}")


async def cursor_to(pilot, tree: VariableTree, expression: str) -> None:
    line, _ = row(tree, expression)
    while tree.cursor_line != line:
        await pilot.press("down" if tree.cursor_line < line else "up")


@pytest.mark.live
async def test_ticking_a_param_and_a_member_with_a_type_override_captures_the_right_values(prog, tracefs_root):
    before = uprobes_on(tracefs_root, prog)
    try:
        app = app_for(prog)
        async with app.run_test(size=(80, 24)) as pilot:
            builder = await open_builder(pilot, "work")
            tree = builder.query_one("#variables", VariableTree)
            await until(pilot, lambda: tree.root.children, "the variables load")
            assert [node.data.name for node in tree.root.children] == ["rec", "n", "sum"]
            await pilot.press("f6")
            assert tree.has_focus
            await cursor_to(pilot, tree, "n")
            await pilot.press("space")  # tick n
            await cursor_to(pilot, tree, "rec")
            await pilot.press("right")  # expand rec: its members load lazily
            await until(pilot, lambda: row(tree, "rec") and tree.get_node_at_line(row(tree, "rec")[0] + 1) is not None
                        and tree.get_node_at_line(row(tree, "rec")[0] + 1).data.expression == "rec->id", "rec's members")
            await cursor_to(pilot, tree, "rec->id")
            await pilot.press("enter")  # tick rec->id
            await pilot.press(*["t"] * 11)  # u8 u16 u32 u64 s8 s16 s32 s64 x8 x16 x32
            await cursor_to(pilot, tree, "rec->name")
            await pilot.press("space")  # char *: captured as a string
            await settled(pilot)
            assert builder.query_one("#args").value == "n rec->id:x32 rec->name:string"
            assert tree.ticked == {"n": None, "rec->id": "x32", "rec->name": "string"}
            _, name_row = row(tree, "rec->name")
            assert str(tree.render_label(name_row, Style(), Style())).startswith("[x]")
            _, probes = expected(prog, "work", "n", "rec->id:x32", "rec->name:string")
            assert [p.definition() for p in builder.preview.probes] == [p.definition() for p in probes]
            # unticking removes the word; typing it back ticks the node again (Args is the truth)
            await cursor_to(pilot, tree, "n")
            await pilot.press("space")
            assert builder.query_one("#args").value == "rec->id:x32 rec->name:string"
            assert "n" not in tree.ticked
            builder.query_one("#args").value = "rec->id:x32 rec->name:string n"
            await settled(pilot)
            assert tree.ticked["n"] is None
            await pilot.press("ctrl+s")
            await settled(pilot)  # Create runs in a worker
            events_screen = app.screen
            assert isinstance(events_screen, EventsScreen)
            await until(pilot, lambda: events_screen.session is not None, "the events screen records")
            await asyncio.to_thread(subprocess.run, [str(prog), "2"], check=True, capture_output=True)
            await until(pilot, lambda: len(events_screen.store) >= 2, "two events")
            bodies = [event.body for event in events_screen.store.view_rows(0, 2)]
            assert [re.search(r'id=(\S+) name="(\w+)" n=(\d+)', body).groups() for body in bodies] == [
                ("0x7", "seven", "1"), ("0x8", "seven", "2")]
    finally:
        lifetime.undo.run_all()
    assert uprobes_on(tracefs_root, prog) == before


async def test_return_probe_offers_retval_as_a_tickable_node(prog):
    app = app_for(prog)
    async with app.run_test(size=(80, 24)) as pilot:
        builder = await open_builder(pilot, "work")
        builder.query_one("#kind").value = "return"
        await settled(pilot)
        tree = builder.query_one(VariableTree)
        await until(pilot, lambda: [n.data.name for n in tree.root.children][-1:] == ["$retval"], "$retval offered")
        _, rec = row(tree, "rec")
        assert not rec.data.capturable and "uprobes cannot read arguments at function exit" in str(rec.label)
        line, _ = row(tree, "$retval")
        await pilot.click(tree, offset=(8, line))  # a click on the row ticks it
        await settled(pilot)
        assert builder.query_one("#args").value == "$retval"
        await pilot.click(tree, offset=(8, row(tree, "rec")[0]))  # and on a row that cannot be: it says why
        assert "uprobes cannot read arguments at function exit" in str(builder.query_one("#status").render())
        assert builder.query_one("#args").value == "$retval"
        assert builder.preview.probes[0].definition() == expected(prog, "work%return", "$retval")[1][0].definition()


async def test_copy_keys_put_each_command_on_the_clipboard_and_say_so(prog):
    app = app_for(prog)
    async with app.run_test(size=(80, 24)) as pilot:
        builder = await open_builder(pilot, "work")
        await pilot.press(*"rec->id")
        await settled(pilot)
        spec, [probe] = expected(prog, "work", "rec->id")
        await pilot.press("f3")
        assert app.clipboard == perf_command(spec, probe.group, probe.event)
        assert str(builder.query_one("#status").render()).startswith("copied the perf command to the clipboard")
        await pilot.press("f2")  # the definition and its filter, whole (the preview cuts them at 80 columns)
        assert app.clipboard == "\n".join([
            f"echo '{probe.definition()}' >> /sys/kernel/tracing/uprobe_events",
            f"echo '{spec.filter}' > /sys/kernel/tracing/events/{probe.group}/work/filter"])
        await pilot.press("f4")
        assert app.clipboard == bpftrace_oneliner(spec, [probe])


async def test_filter_completes_field_names_and_names_an_unknown_field(prog):
    app = app_for(prog)
    async with app.run_test(size=(80, 24)) as pilot:
        builder = await open_builder(pilot, "work")
        await pilot.press(*"rec->flags n")
        await settled(pilot)
        await pilot.click("#filter")
        await pilot.press("f", "right")  # the suggestion is accepted with right
        assert builder.query_one("#filter").value == "flags"
        await pilot.press(*" > 1 && comm")
        assert builder.query_one("#filter").value == "flags > 1 && comm"
        await pilot.press(*' == "x" || bogus > 2')
        await settled(pilot)
        preview = builder.preview
        assert preview.error.message == "'bogus': this event has no such field"
        assert preview.mark.text[preview.mark.start:preview.mark.end] == "bogus"
        assert ("at", 'filter: flags > 1 && comm == "x" || bogus > 2 ') in preview.lines()
        builder.query_one("#filter").value = "flags > && n < 3"  # our grammar's own error, its column marked
        await settled(pilot)
        mark = builder.preview.mark
        assert builder.preview.error.message == "filter error at column 9: expected a number or a quoted string, found '&&'"
        assert mark.text[mark.start:mark.end] == "&&"


async def test_compiler_error_marks_the_offending_token_in_reverse_video(prog):
    app = app_for(prog)
    async with app.run_test(size=(80, 24)) as pilot:
        builder = await open_builder(pilot, "work")
        await pilot.press(*"n rec->bogus:u8")
        await settled(pilot)
        mark = builder.preview.mark
        assert mark.text == "args: n rec->bogus:u8" and mark.text[mark.start:mark.end] == "rec->bogus:u8"
        builder.query_one("#event").value = "9lives"
        await settled(pilot)
        mark = builder.preview.mark
        assert "'9lives'" in builder.preview.error.message and mark.text[mark.start:mark.end] == "9lives"
        await pilot.pause()
        widget = builder.query_one(ProbePreview)
        strips = widget.render_lines(Region(0, 0, widget.size.width, widget.size.height))
        marked = [segment.text for strip in strips for segment in strip if segment.style and segment.style.reverse]
        assert marked == ["9lives"]  # on screen, only the offending token is in reverse video


@pytest.mark.live
async def test_kernel_refusal_shows_the_error_log_with_its_caret_token_marked(prog, tracefs_root):
    before = uprobes_on(tracefs_root, prog)
    app = app_for(prog)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            builder = await open_builder(pilot, "work")
            await pilot.press(*"n:symbol")  # our grammar takes it; uprobes have no symbol type
            await settled(pilot)
            assert builder.preview.error is None
            await pilot.press("ctrl+s")
            await settled(pilot)  # Create runs in a worker
            assert builder.created == []
            preview = builder.preview
            assert preview.error.message == "the kernel refused it: trace_uprobe: Unknown type is specified"
            assert preview.mark.text[preview.mark.start:preview.mark.end] == "symbol"
            assert str(builder.query_one("#status").render()).startswith("not created: the kernel refused it")
    finally:
        lifetime.undo.run_all()
    assert uprobes_on(tracefs_root, prog) == before


async def test_lab_mode_hands_the_probe_to_an_administrator_and_writes_nothing(prog, tracefs_root):
    before = uprobes_on(tracefs_root, prog)  # only ours: others' tests make probes at the same time
    reason = "cannot write /sys/kernel/tracing/uprobe_events (test)"

    class Host(App):
        def on_mount(self) -> None:
            self.push_screen(ProbeBuilderScreen("work", binary=str(prog), sources=locate(), variable="rec->id",
                                                lab_reason=reason))

    async with Host().run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        builder = pilot.app.screen
        assert reason in str(builder.query_one("#lab").render())
        assert not builder.query("#create") and not builder.query("#pin") and builder.query("#handoff")
        assert builder.query_one("#group").value == DEFAULT_PERSISTENT_GROUP  # not a run's group: it outlives us
        spec = parse_spec(["work", "rec->id"], binary=str(prog), group=DEFAULT_PERSISTENT_GROUP)
        [probe] = compile_spec(spec, DEFAULT_PERSISTENT_GROUP)
        admin = builder.preview.admin
        assert admin[1] == f"sudo {perf_command(spec, probe.group, probe.event)}"
        assert f"echo '{probe.definition()}' | sudo sh -c 'cat >> /sys/kernel/tracing/uprobe_events'" in admin
        assert any("chgrp -R perf /sys/kernel/tracing" in line for line in admin)
        await pilot.press("ctrl+s")
        await settled(pilot)  # Create runs in a worker
        assert pilot.app.clipboard == "\n".join(admin)
        assert "for an administrator" in str(builder.query_one("#status").render())
    assert uprobes_on(tracefs_root, prog) == before


@pytest.fixture
def stripped_prog(tmp_path) -> Path:
    binary = tmp_path / "prog"
    subprocess.run(["gcc", "-O0", "-o", str(binary), str(C_PROGRAM)], check=True)  # no -g
    return binary


async def test_a_binary_without_dwarf_says_so_and_keeps_the_args_box_for_registers(stripped_prog):
    binary = stripped_prog

    class Host(App):
        def on_mount(self) -> None:
            self.push_screen(ProbeBuilderScreen("work", binary=str(binary), sources=locate()))

    async with Host().run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        builder = pilot.app.screen
        note = builder.query_one("#tree-note")
        await until(pilot, lambda: "no DWARF" in str(note.render()), "the tree says why it is empty")
        assert "type registers in Args" in str(note.render()) and note.display
        assert not builder.query_one(VariableTree).root.children
        await pilot.press(*"%di:u32")
        await settled(pilot)
        assert builder.preview.probes[0].definition() == expected(binary, "work", "%di:u32")[1][0].definition()
