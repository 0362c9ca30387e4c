"""``count -x PROG FUNC --by stack`` on this machine's uprobes: the program's own stacks, named from its symbol
table, from a program built with frame pointers; from one built without, the function and its caller and a
plain word about why. This kernel has no hist triggers: the user-space engine counts the stacks the kernel prints
(userstacktrace); tests/kernel/test_stacks_guest.py checks kernel stacks against bpftrace."""

from __future__ import annotations

import signal
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from kprobe_tui.stream.stacks import frame_symbol
from tests.aggregate_cli import SOURCE as FLOOD_SOURCE
from tests.aggregate_cli import Aggregation

pytestmark = pytest.mark.live

VIA_A, VIA_B = 5, 3
FLOOD = 100_000
SOURCE = r"""
#include <unistd.h>
__attribute__((noinline)) int leaf(int x) { return x + 1; }
__attribute__((noinline)) int via_a(int x) { return leaf(x) * 2; }
__attribute__((noinline)) int via_b(int x) { return leaf(x) * 3; }
int main(void) {
    int total = 0;
    for (int i = 0; i < %(a)d; i++) total += via_a(i);
    for (int i = 0; i < %(b)d; i++) total += via_b(i);
    usleep(500000);  /* alive while its stacks are read: the kernel names a frame's file from the live process */
    return total == 0;
}
"""


def build(directory: Path, name: str, *flags: str) -> Path:
    source = directory / "stacks.c"
    source.write_text(SOURCE % {"a": VIA_A, "b": VIA_B})
    subprocess.run(["gcc", "-O1", *flags, "-o", str(directory / name), str(source)], check=True)
    return directory / name


def symbols(record: dict) -> Counter:
    stacks: Counter = Counter()
    for entry in record["stacks"]:
        stacks[tuple(frame_symbol(frame) for frame in entry["stack"])] += entry["count"]
    return stacks


def test_user_stacks_of_a_program_with_frame_pointers_are_named_and_counted(tmp_path, tracefs_root):
    program = build(tmp_path, "kpt_stacks_fp", "-fno-omit-frame-pointer")
    run = Aggregation("count", "-x", str(program), "leaf", "--by", "stack,comm")
    folded = Aggregation("count", "-x", str(program), "leaf", "--by", "stack", "--folded", json_output=False)
    for each in (run, folded):
        assert "user engine: a uprobe's stack is the program's" in each.ready()
    subprocess.run([str(program)], check=True)
    record = run.final()
    stacks = symbols(record)
    assert {entry["comm"] for entry in record["stacks"]} == {program.name}
    # At a function's entry its frame is not made yet: the kernel's walk starts at the caller's frame, and
    # the caller comes from the return address the probe captures.
    callers: Counter = Counter()
    for stack, hits in stacks.items():
        callers[stack[-3:]] += hits
    assert callers == {("main", "via_a", "leaf"): VIA_A, ("main", "via_b", "leaf"): VIA_B}, stacks
    assert not any("frame pointers" in line for line in run.stderr_lines)
    folded.proc.send_signal(signal.SIGINT)
    out, _ = folded.proc.communicate(timeout=300)
    lines = [line.rsplit(" ", 1) for line in out.splitlines()]
    assert folded.proc.returncode == 0 and sum(int(count) for _, count in lines) == VIA_A + VIA_B
    assert all(frames.split(";")[-1] == f"leaf+0x0 [{program.name}]" for frames, _ in lines)


def test_a_program_without_frame_pointers_gives_shallow_stacks_and_says_why(tmp_path, tracefs_root):
    program = build(tmp_path, "kpt_stacks_nofp", "-fomit-frame-pointer")
    run = Aggregation("count", "-x", str(program), "leaf", "--by", "stack")
    run.ready()
    subprocess.run([str(program)], check=True)
    assert symbols(run.final()) == {("via_a", "leaf"): VIA_A, ("via_b", "leaf"): VIA_B}
    assert any("built without frame pointers" in line and "-fno-omit-frame-pointer" in line for line in run.stderr_lines)


def test_a_flood_the_reader_cannot_keep_up_with_is_counted_or_said_lost_to_the_hit(tmp_path, tracefs_root):
    """100k hits with a user stack each: what the reader did not take (the ring overflowed, or held it at the
    end) is counted lost, an event and its stack being two records of the ring."""
    program = tmp_path / "kpt_stacks_flood"
    subprocess.run(["gcc", "-O1", "-fno-omit-frame-pointer", "-o", str(program), str(FLOOD_SOURCE)], check=True)
    run = Aggregation("count", "-x", str(program), "work", "--by", "stack")
    run.ready()
    subprocess.run([str(program), "flood", str(FLOOD)], check=True, stdout=subprocess.DEVNULL)
    record = run.final()
    assert sum(entry["count"] for entry in record["stacks"]) + record["lost"] == FLOOD
