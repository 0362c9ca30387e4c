"""The flame graph walked in a real terminal (tmux, 80x24): zoom, search, a click, and ``s`` to the source.

The app is kprobe-tui on Debian 6.1's captured data, with the 6.1 guest's kmem_cache_alloc stacks
(tests/fixtures/stacks) handed to it as the statistics view hands them (``OpenFlame``): what is checked
is what a person sees on the screen.
"""

from __future__ import annotations

import sys

from tests.tmux_pane import PROJECT, Terminal

LAUNCHER = """
import sys
sys.path.insert(0, {project!r})
from kprobe_tui.kernel.snapshot import open_snapshot
from kprobe_tui.tui.app import KprobeTui
from kprobe_tui.tui.screens.flame import OpenFlame
from tests.tui.states import SNAPSHOT_61, guest_stacks

class Walk(KprobeTui):
    def on_mount(self):  # after KprobeTui's own (Textual calls each class's handler)
        self.post_message(OpenFlame(guest_stacks(), "count kmem_cache_alloc · by stack"))

Walk(open_snapshot(SNAPSHOT_61)).run()
"""


def status(terminal: Terminal) -> str:
    return terminal.screen().splitlines()[-2].strip()


def test_zoom_search_click_and_source_in_a_terminal(terminal, tmp_path):
    launcher = tmp_path / "walk.py"
    launcher.write_text(LAUNCHER.format(project=str(PROJECT)))
    terminal.type(f"cd {tmp_path} && TMPDIR={tmp_path} {sys.executable} {launcher}; echo EXIT=$?")
    screen = terminal.screen
    terminal.wait(lambda: "count kmem_cache_alloc · by stack" in screen() and "⏎ Zoom" in screen(), "the flame graph")
    terminal.wait(lambda: status(terminal).startswith("all · 14,988 (100.0% of all)"), "its status line")
    assert screen().splitlines()[2].startswith("all")  # under the title and the search bar

    # three calls down the widest path, then zoomed in: the frame over the whole width, its callers above
    terminal.keys("Down", "Down", "Down")
    terminal.wait(lambda: status(terminal).startswith("__x64_sys_openat+0x6a · 7,940 (53.0% of all)"), "the cursor's frame")
    terminal.keys("Enter")
    terminal.wait(lambda: "of __x64_sys_openat+0x6a)" in status(terminal), "the zoom")
    assert screen().splitlines()[5].rstrip(" ▁▂▃▄▅▆▇█") == "__x64_sys_openat+0x6a"  # nothing beside it: the whole row

    # a search, typed fast: its frames counted in the bar
    terminal.keys("/", "p", "9", "_", "c", "l", "i", "e", "n", "t", "Enter")
    terminal.wait(lambda: "/ p9_client " in screen() and "frames, " in screen().splitlines()[1],
                  "the matches' count and share")

    # a click on a frame selects it; s opens its function's source
    column, row = terminal.find("do_filp_open+0xaf")
    terminal.click(column + 1, row)
    terminal.wait(lambda: status(terminal).startswith("do_filp_open+0xaf · "), "the click's frame")
    terminal.keys("s")
    # the snapshot has no debug info: the view says so, with the prototype and the probes one key away
    terminal.wait(lambda: "struct file *do_filp_open(int dfd" in screen() and "enter: entry probe" in screen(),
                  "do_filp_open's source view")

    # back: the flame graph as it was, then zoomed out, then the browser
    terminal.keys("Escape")
    terminal.wait(lambda: status(terminal).startswith("do_filp_open+0xaf · "), "back on the flame graph")
    terminal.keys("Escape")
    terminal.wait(lambda: "(53.0% of all)" not in status(terminal) and "of __x64_sys_openat" not in status(terminal),
                  "zoomed out")
    terminal.keys("Escape")
    terminal.wait(lambda: "⏎ Zoom" not in screen(), "the browser")
    terminal.keys("q")
    terminal.wait(lambda: "EXIT=0" in screen(), "the app ends cleanly")
