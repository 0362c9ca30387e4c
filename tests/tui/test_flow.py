"""The whole TUI flow through Pilot, as a user drives it, on a C program compiled here.

``kprobe-tui -x BIN``: filter the functions, Enter on one, click a probeable line's number,
tick variables in the builder's tree, Create, run the program and read the right values in the
events table, go back through every screen finding each as it was left, delete the probe in the probes panel,
quit, and nothing is left in the kernel.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
from pathlib import Path

import pytest

from kprobe_tui.cli import build_parser
from kprobe_tui.kernel import lifetime
from kprobe_tui.kernel.sources import locate
from kprobe_tui.probes.binary import BinaryCatalog
from kprobe_tui.tui.app import KprobeTui
from kprobe_tui.tui.screens.builder import ProbeBuilderScreen
from kprobe_tui.tui.screens.events import EventsScreen
from kprobe_tui.tui.screens.functions import FunctionsScreen
from kprobe_tui.tui.screens.probes import ProbesScreen
from kprobe_tui.tui.screens.source import SourceScreen
from kprobe_tui.tui.widgets.function_list import FunctionList
from kprobe_tui.tui.widgets.source_view import SourceView
from kprobe_tui.tui.widgets.variable_tree import VariableTree
from tests.tui.states import until
from tests.tui.uprobes import uprobes_on

PROGRAM = r"""
#include <stdio.h>
#include <stdlib.h>

struct order {
	int id;
	unsigned int qty;
	const char *item;
};

static long total;

__attribute__((noinline)) long price_order(struct order *o, int unit)
{
	long cost = (long)o->qty * unit;

	total += cost;
	return cost;
}

int main(int argc, char **argv)
{
	int calls = argc > 1 ? atoi(argv[1]) : 1;
	struct order o = { 0, 0, "tea" };

	for (int i = 0; i < calls; i++) {
		o.id = 100 + i;
		o.qty = i + 2;
		price_order(&o, 7 * (i + 1));
	}
	printf("%ld\n", total);
	return 0;
}
"""
# A fixed path: uprobe_events lines are told apart by it (other engineers' tests run meanwhile).
FIXED_DIR = Path("/tmp/kprobe-tui-flow-test")


@pytest.fixture(scope="module")
def prog() -> Path:
    FIXED_DIR.mkdir(exist_ok=True)
    (FIXED_DIR / "flow_prog.c").write_text(PROGRAM)
    out = FIXED_DIR / "flow_prog"
    subprocess.run(["gcc", "-O0", "-g", "-o", str(out), str(FIXED_DIR / "flow_prog.c")], check=True)
    return out



def leftovers(root: Path, group: str) -> list[str]:
    """Anything of this run still in the kernel: probes, its instance, an enabled event."""
    found = [line for line in (root / "dynamic_events").read_text().splitlines() if f"{group}/" in line]
    found += [name for name in (root / "instances").iterdir() if name.name == group] if (root / "instances").exists() else []
    found += [str(p) for p in (root / "events").glob(f"{group}/*/enable") if p.read_text().strip() != "0"]
    return found


async def move_to(pilot, tree: VariableTree, expression: str) -> None:
    """Arrow keys to the row capturing ``expression``."""
    rows = [tree.get_node_at_line(y) for y in range(tree.last_line + 1)]
    [target] = [y for y, node in enumerate(rows) if node.data.expression == expression]
    while tree.cursor_line != target:
        await pilot.press("down" if tree.cursor_line < target else "up")


async def tick(pilot, tree: VariableTree, expression: str) -> None:
    await move_to(pilot, tree, expression)
    await pilot.press("space")


@pytest.mark.live
async def test_filter_source_click_build_create_see_values_back_delete_quit(prog, tracefs_root):
    before = uprobes_on(tracefs_root, prog)
    group = lifetime.run_name()
    args = build_parser().parse_args(["-x", str(prog)])
    app = KprobeTui(locate(), BinaryCatalog(args.binary))
    try:
        async with app.run_test(size=(120, 36)) as pilot:
            functions_screen = app.screen
            functions = functions_screen.query_one(FunctionList)
            await until(pilot, lambda: functions.rows, "the function list is filled")
            while functions_screen.mode != "fuzzy":
                await pilot.press("ctrl+t")
            await pilot.press("slash", *"prc_ordr", "escape")
            assert functions.current == "price_order"

            # Enter: the source view, probeable lines numbered as perf -L
            await pilot.press("enter")
            source = app.screen
            assert isinstance(source, SourceScreen)
            view = source.query_one(SourceView)
            await until(pilot, lambda: view.probeable, "the source is shown")
            target = next(n for n, text in enumerate(view.texts, 1) if "total += cost;" in text)
            assert target in view.probeable
            while view.cursor < target:
                await pilot.press("n")
            await until(pilot, lambda: "cost" in source.capturable, "the variables of the line are listed")
            assert source.capturable == ["cost", "o", "unit"]

            # a click on the line's number: the builder, for a line probe there
            row = target - 1 - int(view.scroll_offset.y)
            await pilot.click(view, offset=(3, row))
            builder = app.screen
            assert isinstance(builder, ProbeBuilderScreen) and builder.function == "price_order"
            relative = target - view.number_base
            assert builder.query_one("#kind").value == "line"
            assert builder.query_one("#number").value == str(relative)
            # tick cost, then expand o and tick its id
            tree = builder.query_one(VariableTree)
            await until(pilot, lambda: tree.root.children, "the variables tree is filled")
            tree.focus()  # (a click would tick the row it lands on)
            await pilot.pause()
            await tick(pilot, tree, "cost")
            await move_to(pilot, tree, "o")
            await pilot.press("right")
            await until(pilot, lambda: tree.cursor_node.children, "o's members are listed")
            await tick(pilot, tree, "o->id")
            assert builder.query_one("#args").value == "cost o->id"
            await until(pilot, lambda: builder.preview is not None and builder.preview.error is None
                        and " id=" in builder.preview.probes[0].definition(), "the preview compiles")
            await pilot.press("ctrl+s")  # created in a worker; the events screen then records in another
            await until(pilot, lambda: isinstance(app.screen, EventsScreen) and app.screen.session is not None,
                        "the events screen records")
            events_screen = app.screen
            event_name = f"price_order_L{relative}"  # a line probe's name says which line
            assert builder.created == [f"{group}/{event_name}"]
            assert any(line.startswith(f"p:{group}/{event_name} ") for line in uprobes_on(tracefs_root, prog))

            await asyncio.to_thread(subprocess.run, [str(prog), "3"], check=True, capture_output=True)
            await until(pilot, lambda: len(events_screen.store) >= 3, "three events in the table")
            fired = [re.search(r"cost=(-?\w+) id=(-?\w+)", event.body).groups()
                     for event in events_screen.store.view_rows(0, 3)]
            assert [(int(cost, 0), int(ident, 0)) for cost, ident in fired] == [(14, 100), (42, 101), (84, 102)]
            assert (tracefs_root / "instances" / group).exists()

            # back: each screen as it was left
            await pilot.press("escape")
            assert app.screen is builder
            await until(pilot, lambda: not (tracefs_root / "instances" / group).exists(),
                        "the events screen takes its instance along (in a worker)")
            await pilot.press("escape")
            assert app.screen is source and view.cursor == target
            assert source.query_one(SourceView) is view and view.probeable
            await pilot.press("escape")
            assert app.screen is functions_screen and isinstance(functions_screen, FunctionsScreen)
            assert functions_screen.query_one("#filter").value == "prc_ordr" and functions_screen.mode == "fuzzy"
            assert functions.current == "price_order" and functions.has_focus

            # the probes panel: ours is listed; delete it there, then quit
            await pilot.press("l")
            panel = app.screen
            assert isinstance(panel, ProbesScreen)
            await pilot.press("slash", *f"{group}/{event_name}", "enter")
            await until(pilot, lambda: panel.current() is not None, "our probe is listed")
            assert panel.current().full_name == f"{group}/{event_name}"
            await pilot.press("d")
            await until(pilot, lambda: uprobes_on(tracefs_root, prog) == before, "the probe is deleted")
            await pilot.press("escape")
            assert app.screen is functions_screen
            await pilot.press("q")
        assert leftovers(tracefs_root, group) == []
    finally:
        lifetime.undo.run_all()  # what the end of the process does, should the test fail half-way
    assert uprobes_on(tracefs_root, prog) == before and leftovers(tracefs_root, group) == []
