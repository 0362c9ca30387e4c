"""The seed lab's six steps at 80x24 in a real terminal (tmux), as a student walks them, keys and mouse.

A real uprobe on a program compiled here, whose loop line (``work:3``) has four addresses. What is
checked is what a person sees on the screen: the help key from the first paint, each main action
reached by a click (SGR mouse) or a key, letters never landing in a field that was left, Create twice
making nothing new, the events table and the count agreeing on the line, and the why-pane whole (the
banner and status lines at 80x24 are in the snapshots, tests/tui/test_screens.py).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.tmux_pane import Terminal, start_kprobe_tui

LAB = Path(__file__).parent / "c" / "lab_walk.c"
HITS_PER_PASS = 9  # work(3)'s loop line: its start once, the step 3 times, the jump to the test once, the test 4 times


@pytest.fixture
def lab(tmp_path) -> Path:
    binary = tmp_path / "lab_walk"
    subprocess.run(["gcc", "-O0", "-g", "-o", str(binary), str(LAB)], check=True)
    return binary


def ours(tracefs_root: Path, binary: Path) -> list[str]:
    return [line for line in (tracefs_root / "uprobe_events").read_text().splitlines() if str(binary) in line]


def read(terminal: Terminal) -> str:
    """The screen as a person reads it: lines joined, borders, scroll bars and runs of spaces dropped (wrapped
    text whole)."""
    lines = (re.sub(r"[▁▂▃▄▅▆▇█]+\s*$", "", line) for line in terminal.screen().splitlines())
    return " ".join(" ".join(line.strip(" │╭╮╰╯─").split()) for line in lines)


def footer(terminal: Terminal) -> str:
    return terminal.screen().splitlines()[-1]


@pytest.mark.live
def test_the_lab_at_80x24_by_keys_and_clicks(terminal, tmp_path, lab, tracefs_root):
    start_kprobe_tui(terminal, tmp_path, "-x", str(lab))
    screen = terminal.screen
    # the help key is on screen from the first paint, docked at the footer's right
    assert footer(terminal).rstrip().endswith("? Help")

    # 1. find the function and why: typed fast after /, then a click on its row
    terminal.keys("/", "w", "o", "r", "k")
    terminal.wait(lambda: "● work" in screen() and "1/" in screen().splitlines()[1], "the filter leaves work")
    terminal.click(*terminal.find("● work"))
    terminal.wait(lambda: "⏎ Source" in footer(terminal), "the click moves to the list, whose keys the footer shows")
    terminal.wait(lambda: "described by DWARF: capture arguments and locals by name, and probe source lines"
                  in read(terminal), "the why-pane's whole reason")

    # 2. its source, by a click on the footer's Source: the filter keeps what was typed (no letter went there)
    terminal.click(*terminal.find("⏎ Source"))
    terminal.wait(lambda: "probeable lines" in screen(), "the source view")
    assert re.search(r"^ work  \S+lab_walk\.c", screen(), re.M)

    # 3. a probe built with the mouse: a click on line 3's number; the builder says it is four addresses first
    loop = next(row for row, line in enumerate(screen().splitlines()) if "for (int i = 0; i < n; i++)" in line)
    terminal.click(screen().splitlines()[loop].index("3"), loop)
    terminal.wait(lambda: "work:3 is 4 addresses" in read(terminal), "the builder's note on the line's addresses")
    assert re.search(r"Kind +line +▼ +3 ", screen()) and "One event, work_L3, fires at each: the events table and the count name it work:3" in read(terminal)
    before = ours(tracefs_root, lab)
    terminal.click(*terminal.find(" Create "))
    terminal.wait(lambda: "following" in screen() and "starting" not in screen(), "the events screen records")
    made = [line for line in ours(tracefs_root, lab) if line not in before]
    assert len(made) == 4 and len({line.split()[0] for line in made}) == 1  # four probes, one event

    # 4. live events, a filter, the detail and a pause
    subprocess.run([str(lab), "2"], check=True, capture_output=True)
    terminal.wait(lambda: f"{2 * HITS_PER_PASS} shown" in screen(), "the line's hits, once each")
    assert "<...>" not in screen()  # a new process's first hits are named (stream/comms.py)
    # each hit is one row of the line, named as the builder was asked and as the count names it
    terminal.wait(lambda: re.search(r"^ work:3 [\d,]+/s", screen(), re.M), "the rate row names the line")
    rows = [line for line in screen().splitlines() if re.search(r" lab_walk +\d+ ", line)]
    assert rows and all(re.search(r" \d+ work:3\b", line) for line in rows), screen()
    terminal.keys("/")
    terminal.tmux("send-keys", "-t", "t", "-l", 'comm == "lab_walk"')
    terminal.keys("Enter")
    terminal.wait(lambda: "shown / " in screen() or "view" in screen() or "kernel" in screen().splitlines()[1],
                  "the filter applies")
    terminal.keys("p")  # Enter left the filter for the table: p pauses, it is not typed into the filter
    terminal.wait(lambda: "PAUSED" in screen(), "paused")
    assert 'comm == "lab_walk"' in screen().splitlines()[1] and 'lab_walk"p' not in screen()
    terminal.click(*terminal.find("Pause"))  # the footer's keys are buttons: a click resumes, as p does
    terminal.wait(lambda: "PAUSED" not in screen(), "resumed by a click")
    terminal.click(*terminal.find("Detail"))
    terminal.wait(lambda: "one of its 4 addresses" in read(terminal), "the detail names the address that fired")
    assert re.search(r"work:3 \(event work_L3\) at work\+\d+", read(terminal))  # the name a filter gives
    table_rows = int(re.search(r"^ (\d+) shown", screen(), re.M)[1])
    assert table_rows == 2 * HITS_PER_PASS

    # 5. a count per process of the same line: the same number as the table, for the same two passes
    terminal.keys("a")
    terminal.wait(lambda: "count work:3 · by comm" in screen() and " engine: " in screen(), "the count runs")
    subprocess.run([str(lab), "2"], check=True, capture_output=True)
    terminal.wait(lambda: f"count {table_rows} in 1 key" in screen(), "the count agrees with the table")
    assert re.search(rf"lab_walk +{table_rows} ", screen())

    # 6. back to the builder: Create again makes nothing; Escape leaves the field, q quits, nothing stays
    terminal.keys("Escape")
    terminal.wait(lambda: "following" in screen() or "PAUSED" in screen(), "back on the events")
    terminal.keys("Escape")
    terminal.wait(lambda: "Kind" in screen(), "back in the builder")
    terminal.wait(lambda: ours(tracefs_root, lab) == before + made, "the statistics view's probes go (off the UI thread)")
    terminal.keys("C-s")
    terminal.wait(lambda: "already probes this" in read(terminal), "the twin is refused")
    assert "nothing was made" in read(terminal) and ours(tracefs_root, lab) == before + made  # made nothing
    terminal.keys("Escape")  # alone: Escape and a letter at once are Alt+letter to a terminal
    terminal.wait(lambda: "probeable lines" in screen(), "Escape on the builder's button goes back to the source")
    terminal.keys("q")
    terminal.wait(lambda: "EXIT=0" in screen(), "q quits")
    assert ours(tracefs_root, lab) == before
