"""``f`` on the events screen: the stored events' kernel stacks as a flame graph. Live: a uprobe on leaf()
(tests/live/test_stacks_live.py's program: 8 calls) tailed with stacks on (``s``), each of its 8 events
one hit of the graph; replayed: only the events shown (as filtered) and only those with a stack."""

from __future__ import annotations

import os
import subprocess

import pytest

from kprobe_tui.kernel import lifetime
from kprobe_tui.kernel.events import Events
from kprobe_tui.kernel.sources import locate
from kprobe_tui.kernel.tracefs import Tracefs
from kprobe_tui.probes.symbols import ElfSymbols
from kprobe_tui.stream.parser import Event
from kprobe_tui.tui.app import KprobeTui
from kprobe_tui.tui.navigation import ShowEvents
from kprobe_tui.tui.screens.events import EventsScreen
from kprobe_tui.tui.screens.flame import FlameScreen
from tests.live.test_aggregate import leftovers
from tests.live.test_stacks_live import VIA_A, VIA_B, build
from tests.tui.states import until

GROUP = f"kptflame{os.getpid()}"


@pytest.mark.live
async def test_f_with_stacks_on_draws_the_tailed_events_kernel_stacks(tmp_path, tracefs_root):
    program = build(tmp_path, "kpt_flame_ev", "-fno-omit-frame-pointer")
    top = Tracefs(tracefs_root)
    offset = ElfSymbols(program).function("leaf").file_offset
    top.write("uprobe_events", f"p:{GROUP}/leaf {program}:0x{offset:x}\n")
    try:
        app = KprobeTui(locate())
        async with app.run_test(size=(80, 24)) as pilot:
            app.post_message(ShowEvents([f"{GROUP}/leaf"]))
            await until(pilot, lambda: isinstance(app.screen, EventsScreen), "the events screen opens")
            events = app.screen
            await until(pilot, lambda: events.session is not None and not events.starting, "the tail is up")
            await pilot.press("f")  # no stacks yet: said, and the screen stays
            await until(pilot, lambda: any("s records them" in note.message for note in app._notifications),
                        "no stacks is said")
            assert app.screen is events
            await pilot.press("s")
            await until(pilot, lambda: events.session.stacktrace, "stacks on")
            subprocess.run([str(program)], check=True)
            await until(pilot, lambda: events.store.total == VIA_A + VIA_B, "leaf's 8 calls")
            await pilot.press("f")
            await until(pilot, lambda: isinstance(app.screen, FlameScreen), "the flame graph opens")
            assert app.screen.flame.total == VIA_A + VIA_B
            assert f"{GROUP}/leaf · kernel stacks of 8 events" in str(app.screen.query_one("#flame-title").render())
            await pilot.press("escape")
            await until(pilot, lambda: app.screen is events, "escape goes back to the events")
            await pilot.press("escape", "q")
    finally:
        for event in Events(top).list():
            if event.group == GROUP:
                Events(top).delete(event)
    assert leftovers(tracefs_root, lifetime.run_name()) == []


async def test_only_the_events_shown_with_a_stack_are_drawn():
    def event(comm: str, stack: tuple[str, ...] | None) -> Event:
        return Event(1.0, 0, 7, 7, comm, "....", "leaf", "(leaf+0x0/0x8)", stack)

    stored = [event("dd", ("vfs_read+0x5/0x1a0", "ksys_read+0x70/0xd0")), event("dd", ("vfs_read+0x5/0x1a0", "ksys_read+0x70/0xd0")),
              event("cat", ("vfs_read+0x5/0x1a0", "kernel_read+0x10/0x20")), event("dd", None)]
    app = KprobeTui(locate())
    async with app.run_test(size=(80, 24)) as pilot:
        screen = EventsScreen.replay(stored)
        await app.push_screen(screen)
        await pilot.press("slash", *'comm == "dd"', "enter")
        await until(pilot, lambda: screen.store.view_len() == 3, "the filter keeps dd's")
        await pilot.press("f")  # Enter took the focus back to the table
        await until(pilot, lambda: isinstance(app.screen, FlameScreen), "the flame graph opens")
        assert app.screen.flame.total == 2  # dd's third event has no stack; cat's is filtered out
        assert str(app.screen.query_one("#flame-title").render()) == "events · kernel stacks of 2 events"


async def test_stacks_past_the_bound_are_left_out_and_said(monkeypatch):
    monkeypatch.setenv("KPROBE_TUI_MAX_STACKS", "2")
    stored = [Event(1.0, 0, 7, 7, "dd", "....", "leaf", "(leaf+0x0/0x8)", (f"caller_{n % 3}+0x1", "vfs_read+0x5"))
              for n in range(9)]
    app = KprobeTui(locate())
    async with app.run_test(size=(120, 24)) as pilot:
        await app.push_screen(EventsScreen.replay(stored))
        await pilot.press("f")
        await until(pilot, lambda: isinstance(app.screen, FlameScreen), "the flame graph opens")
        assert app.screen.flame.total == 6
        title = str(app.screen.query_one("#flame-title").render())
        assert title == "events · kernel stacks of 6 events · 3 events of further stacks left out (KPROBE_TUI_MAX_STACKS)"
