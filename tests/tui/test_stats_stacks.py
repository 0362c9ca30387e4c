"""The statistics view keyed by stack, under Pilot, on real uprobes on a program built with frame pointers
(tests/live/test_stacks_live.py's: leaf() called 5 times from via_a() and 3 times from via_b()): ``k`` to the
stack counts what ``count --by stack`` counts of the same calls, ``f`` draws them as a flame graph, and
nothing of the view stays in the kernel once it closes."""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path

import pytest

from kprobe_tui.kernel import lifetime
from kprobe_tui.kernel.sources import locate
from kprobe_tui.probes.binary import BinaryCatalog
from kprobe_tui.stream.stacks import MAX_STACKS_ENV, frame_symbol
from kprobe_tui.tui.app import KprobeTui
from kprobe_tui.tui.screens.flame import FlameScreen
from kprobe_tui.tui.screens.stats import StatsRequest, StatsScreen
from tests.aggregate_cli import Aggregation
from tests.live.test_aggregate import leftovers
from tests.live.test_stacks_live import VIA_A, VIA_B, build
from tests.tui.states import until
from tests.tui.test_stats import answered, clean, closed, counts, drawn, running  # noqa: F401 (clean: a fixture)

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    return build(tmp_path_factory.mktemp("stats_stacks"), "kpt_stats_stk", "-fno-omit-frame-pointer")


async def v_to(pilot, request: StatsRequest, value: str, title: str) -> StatsScreen:
    """The view of ``request`` once ``v`` has made ``value`` its value: the stack key kept, ``title`` said."""
    app = pilot.app
    app.push_screen(StatsScreen(request, app.sources))
    screen = await running(pilot)
    await pilot.press("v")
    assert screen.request.key == "stack" and screen.request.value == value
    screen = await running(pilot)
    assert title in str(screen.query_one("#title").render())
    return screen


async def test_k_to_the_stack_counts_what_the_cli_counts_and_f_draws_them(program, clean):  # noqa: F811
    cli = Aggregation("count", "-x", str(program), "leaf", "--by", "stack")
    app = KprobeTui(locate(), BinaryCatalog(str(program)))
    try:
        async with app.run_test(size=(120, 30)) as pilot:
            app.push_screen(StatsScreen(StatsRequest(("leaf",), str(program), key="comm"), app.sources))
            screen = await running(pilot)
            await pilot.press("k", "k")  # comm -> pid -> stack
            assert screen.request.key == "stack" and "by stack" in str(screen.query_one("#title").render())
            screen = await running(pilot)
            assert screen.choice.engine == "user" and "userstacktrace" in screen.choice.reason
            cli.ready()
            subprocess.run([str(program)], check=True)
            await answered(pilot, screen, VIA_A + VIA_B)
            record = cli.final()

            shown = counts(screen)
            assert shown == {tuple(entry["stack"]): entry["count"] for entry in record["stacks"]}
            callers: Counter = Counter()
            for stack, hits in shown.items():
                callers[tuple(map(frame_symbol, stack[-3:]))] += hits
            assert callers == {("main", "via_a", "leaf"): VIA_A, ("main", "via_b", "leaf"): VIA_B}
            rows = drawn(screen).splitlines()
            assert rows[0].split() == ["STACK", "COUNT"]
            # a row: the innermost frames first (leaf's, on every stack, said once below), the most hits first
            assert rows[1].startswith("← via_a+") and f" {VIA_A} |" in rows[1]
            # -O1 unrolls via_b's loop: three calls from three places in main, one hit each
            assert all(row.startswith("← via_b+") for row in rows[2:])
            summary = str(screen.query_one("#summary").render())
            assert summary == f"count {VIA_A + VIA_B} in {len(shown)} keys · every stack ends in leaf+0x0 [{program.name}]"

            await pilot.press("f")
            await until(pilot, lambda: isinstance(app.screen, FlameScreen), "the flame graph opens")
            flame = app.screen
            assert flame.flame.total == screen.sample.total.count == VIA_A + VIA_B
            assert "count leaf · by stack" in str(flame.query_one("#flame-title").render())
            await pilot.press("escape")
            await until(pilot, lambda: app.screen is screen, "escape goes back to the view")
            await closed(pilot, screen)
    finally:
        if cli.proc.poll() is None:
            cli.finish()


async def test_a_histogram_by_stack_gives_each_call_path_the_values_the_cli_gives_it(program, clean):  # noqa: F811
    """``v`` to a captured value keeps the stack key: one histogram a call path, as ``hist --by stack``."""
    cli = Aggregation("hist", "-x", str(program), "leaf", "x=%di:s32", "--by", "stack")
    app = KprobeTui(locate(), BinaryCatalog(str(program)))
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            request = StatsRequest(("leaf", "x=%di:s32"), str(program), fields=("x",), function="leaf", key="stack")
            screen = await v_to(pilot, request, "x", "x at leaf · by stack")  # count -> x
            cli.ready()
            subprocess.run([str(program)], check=True)
            await answered(pilot, screen, VIA_A + VIA_B)
            record = cli.final()
            shown = {entry.key[0]: {(b.low, b.high): b.count for b in entry.buckets or () if b.count}
                     for entry in screen.sample.total.entries}
            assert shown == {tuple(entry["key"]["stack"]): {(b["low"], b["high"]): b["count"] for b in entry["buckets"]
                                                            if b["count"]} for entry in record["entries"]}
            rows = drawn(screen).splitlines()
            assert rows[0].startswith("@x[← via_a+") and f"count {VIA_A}" in rows[0]  # the most hits first
            assert [row.split()[0] for row in rows[1:5]] == ["[0]", "[1]", "[2,", "[4,"]
            await closed(pilot, screen)
    finally:
        if cli.proc.poll() is None:
            cli.finish()


async def test_a_latency_by_stack_times_each_call_path_as_the_cli_does(program, clean):  # noqa: F811
    """``v`` to latency keeps the stack key: one latency histogram a call path, as ``latency --by stack``."""
    cli = Aggregation("latency", "-x", str(program), "leaf", "--by", "stack")
    app = KprobeTui(locate(), BinaryCatalog(str(program)))
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            request = StatsRequest(("leaf",), str(program), function="leaf", key="stack")
            screen = await v_to(pilot, request, "latency", "latency of leaf · by stack")  # count -> latency
            assert screen.choice.engine == "user" and "userstacktrace" in screen.choice.reason
            cli.ready()
            subprocess.run([str(program)], check=True)
            await answered(pilot, screen, VIA_A + VIA_B)
            record = cli.final()
            shown = {entry.key[0]: entry.count for entry in screen.sample.total.entries}
            assert shown == {tuple(entry["key"]["stack"]): entry["count"] for entry in record["entries"]}
            callers: Counter = Counter()
            for stack, hits in shown.items():
                callers[tuple(map(frame_symbol, stack[-3:]))] += hits
            assert callers == {("main", "via_a", "leaf"): VIA_A, ("main", "via_b", "leaf"): VIA_B}
            rows = drawn(screen).splitlines()
            assert rows[0].startswith("@usecs[← via_a+") and f"count {VIA_A}" in rows[0]  # the most calls first
            await closed(pilot, screen)
    finally:
        if cli.proc.poll() is None:
            cli.finish()


async def test_a_program_without_frame_pointers_is_said_once(tmp_path, clean):  # noqa: F811
    """Its user stacks are the function and its caller: the view says why, once a run, as the CLI does."""
    program = build(tmp_path, "kpt_stats_nofp", "-fomit-frame-pointer")
    app = KprobeTui(locate(), BinaryCatalog(str(program)))
    async with app.run_test(size=(80, 24)) as pilot:
        app.push_screen(StatsScreen(StatsRequest(("leaf",), str(program), key="stack"), app.sources))
        screen = await running(pilot)
        subprocess.run([str(program)], check=True)
        await answered(pilot, screen, VIA_A + VIA_B)
        await pilot.pause(2.5)  # two samples more: still one note
        notes = [note.message for note in app._notifications if note.title == "Shallow stacks"]
        assert len(notes) == 1 and "built without frame pointers" in notes[0] and "-fno-omit-frame-pointer" in notes[0]
        await closed(pilot, screen)


async def test_a_view_that_reaches_its_cap_of_distinct_stacks_stops_and_says_how_to_raise_it(program, clean,  # noqa: F811
                                                                                           monkeypatch):
    """As the CLI: with a cap of two, the third call path stops the run (its probes go at once, the view
    keeps what it counted) and a notice says which cap and how to raise it."""
    monkeypatch.setenv(MAX_STACKS_ENV, "2")
    app = KprobeTui(locate(), BinaryCatalog(str(program)))
    async with app.run_test(size=(80, 24)) as pilot:
        app.push_screen(StatsScreen(StatsRequest(("leaf",), str(program), key="stack"), app.sources))
        screen = await running(pilot)
        subprocess.run([str(program)], check=True)
        await until(pilot, lambda: any(note.title == "Stopped" for note in app._notifications), "the run stops")
        [note] = [note for note in app._notifications if note.title == "Stopped"]
        assert note.message.startswith("stopped: 2 distinct stacks, the most a run keeps") and MAX_STACKS_ENV in note.message
        assert screen.runner.run is None and len(screen.sample.total.entries) == 2
        assert leftovers(Path("/sys/kernel/tracing"), lifetime.run_name()) == []  # gone while the view is open
        await closed(pilot, screen)


def test_the_stack_key_is_offered_for_a_count_a_histogram_and_a_latency():
    request = StatsRequest(("work", "len=%di:s64"), fields=("len",), function="work")
    assert request.keys_offered()[-1] == "stack"
    assert request.command()[-2:] != ["--by", "stack"]
    keyed = StatsRequest(("work", "len=%di:s64"), "/opt/prog", fields=("len",), function="work", key="stack")
    assert keyed.command() == ["kprobe-tui", "count", "-x", "/opt/prog", "work len=%di:s64", "--by", "stack"]
    histogram = keyed.cycled("value")
    assert histogram.key == "stack"  # a histogram of len keeps the stack key
    assert histogram.command() == ["kprobe-tui", "hist", "-x", "/opt/prog", "work", "len=%di:s64", "--by", "stack"]
    latency = histogram.cycled("value")
    assert latency.value == "latency" and latency.key == "stack"  # timed by the entry's stack
    assert latency.command() == ["kprobe-tui", "latency", "-x", "/opt/prog", "work", "--by", "stack"]


@pytest.mark.parametrize(("stacks", "rows"), [
    ({("main", "a"): 2, ("main", "b"): 1}, ["a ← main", "b ← main"]),  # a glob's: different functions
    ({("main", "a"): 2, ("a",): 1}, ["a ← main", "a"]),  # a stack of one frame has no caller to show
    ({("main", "a"): 2, ("other", "a"): 1}, ["← main", "← other"]),
])
async def test_a_frame_is_left_out_of_the_rows_only_when_every_stack_ends_in_it(stacks, rows):
    """Otherwise each row is the whole stack, innermost first."""
    from kprobe_tui.aggregate.offer import Choice
    from kprobe_tui.aggregate.result import Entry, Result, Stats
    from kprobe_tui.aggregate.run import Sample
    from kprobe_tui.tui.widgets.stats_table import StatsTable

    entries = tuple(Entry((stack,), Stats(count)) for stack, count in stacks.items())
    result = Result("count", "kernel", 0.0, 1.0, ("stack",), None, entries, Stats(3), None)
    screen = StatsScreen.replay(StatsRequest(("a*",), key="stack"), Sample(result, result), [], Choice("kernel", "hist", ""))
    app = KprobeTui(locate())
    async with app.run_test(size=(80, 24)) as pilot:
        await app.push_screen(screen)
        table = screen.query_one(StatsTable)
        await until(pilot, lambda: len(table.lines()) > len(rows), "the table is drawn")
        assert [line.plain.split("  ")[0].strip() for line in table.lines()[1:]] == rows
        assert ("every stack ends in a" in str(screen.query_one("#summary").render())) == rows[0].startswith("←")
