"""``count -x PROG FUNC --by stack`` on this machine's uprobes: the program's own stacks, named from its symbol
table, from a program built with frame pointers; from one built without, the function and its caller and a
plain word about why; from one built with -g, each frame's ``file:line`` too, as perf and addr2line give it.
This kernel has no hist triggers: the user-space engine counts the stacks the kernel prints (userstacktrace);
tests/kernel/test_stacks_guest.py checks kernel stacks against bpftrace."""

from __future__ import annotations

import os
import re
import shutil
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


# A return address whose own line (the statement after the call) is not its call's: via_a's, into leaf's frame.
LINES_SOURCE = r"""
#include <unistd.h>
volatile int sink;
__attribute__((noinline)) int deep(int x) { return x + 1; }
__attribute__((noinline)) int leaf(int x) {
    int d = deep(x);
    sink = d;
    return d + 1;
}
__attribute__((noinline)) int via_a(int x) {
    int r = leaf(x);
    sink = r;
    return r * 2;
}
int main(void) {
    int first = via_a(1);
    sink = first;
    int second = via_a(2);
    sink = second;
    usleep(500000);
    return first + second == 0;
}
"""
_FRAME = re.compile(r"(?P<function>\w+)\+(?P<offset>0x[0-9a-f]+) \[(?P<program>[^]]+)\](?: (?P<line>\S+:\d+))?")


def build(directory: Path, name: str, *flags: str, source_text: str = SOURCE) -> Path:
    source = directory / "stacks.c"
    source.write_text(source_text % {"a": VIA_A, "b": VIA_B})
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


def test_a_shallow_walk_is_said_though_the_callers_frame_names_an_inlined_function_too(tmp_path, tracefs_root):
    """Built with -g, via_a's call of leaf is in code inlined from twice: its frame names both, and the kernel's
    walk (two frames) is still what tells a program without frame pointers."""
    source = SOURCE.replace("__attribute__((noinline)) int via_a(int x) { return leaf(x) * 2; }",
                            "static inline int twice(int x) { return leaf(x) * 2; }\n"
                            "__attribute__((noinline)) int via_a(int x) { return twice(x) + 1; }")
    program = build(tmp_path, "kpt_stacks_nofp_g", "-fomit-frame-pointer", "-g", source_text=source)
    run = Aggregation("count", "-x", str(program), "leaf", "--by", "stack")
    run.ready()
    subprocess.run([str(program)], check=True)
    assert symbols(run.final()) == {("via_a", "twice", "leaf"): VIA_A, ("via_b", "leaf"): VIA_B}
    assert any("built without frame pointers" in line and "at most 2 frames" in line for line in run.stderr_lines)


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


def addr2line(program: Path, address: int) -> str:
    """binutils' ``file:line`` of an address, the file's base name as perf prints it."""
    out = subprocess.run(["addr2line", "-e", str(program), f"{address:#x}"], capture_output=True, text=True, check=True)
    file, _, line = out.stdout.strip().split(" (discriminator", 1)[0].rpartition(":")
    return f"{os.path.basename(file)}:{line}"


def perf_srclines(program: Path, function: str, directory: Path) -> list[list[tuple[int, str, str]]]:
    """(ip, symbol, srcline) of each frame of each hit of a uprobe on ``function``, as ``perf script`` gives them."""
    group = f"probe_{program.name}"
    subprocess.run(["perf", "probe", "-q", "-x", str(program), function], check=True)
    try:
        data = directory / "perf.data"
        subprocess.run(["perf", "record", "-q", "-e", f"{group}:{function}", "-g", "-o", str(data), str(program)],
                       check=True, stdout=subprocess.DEVNULL)
        script = subprocess.run(["perf", "script", "-i", str(data), "-F", "ip,sym,srcline"], capture_output=True,
                                text=True, check=True).stdout
    finally:
        subprocess.run(["perf", "probe", "-q", "-d", f"{group}:*"], check=True)
    hits = []
    for block in script.strip().split("\n\n"):
        lines = block.strip("\n").splitlines()
        hits.append([(int(ip, 16), symbol, srcline.strip()) for (ip, symbol), srcline
                     in zip((line.split() for line in lines[0::2]), lines[1::2])])
    return hits


@pytest.mark.skipif(shutil.which("perf") is None, reason="perf is the oracle")
def test_frames_of_a_program_built_with_g_name_their_lines_as_perf_and_addr2line_do(tmp_path, tracefs_root):
    """The probed function's line is perf's; a return address's is its call's (addr2line of the address less
    one), where perf 6.1 prints the return address's own line: both are checked, and here they differ."""
    program = tmp_path / "kpt_stacks_g"
    (tmp_path / "lines.c").write_text(LINES_SOURCE)
    subprocess.run(["gcc", "-O1", "-g", "-fno-omit-frame-pointer", "-o", str(program), str(tmp_path / "lines.c")],
                   check=True)
    run = Aggregation("count", "-x", str(program), "deep", "--by", "stack")
    run.ready()
    subprocess.run([str(program)], check=True)
    stacks = run.final()["stacks"]
    assert sum(entry["count"] for entry in stacks) == 2
    symbols = {fields[2]: int(fields[0], 16) for fields in map(str.split, subprocess.run(
        ["nm", str(program)], capture_output=True, text=True, check=True).stdout.splitlines()) if len(fields) == 3}
    ours: dict[int, str] = {}  # each frame of the program's: its address -> the line we name
    for entry in stacks:
        frames = [_FRAME.match(frame) for frame in reversed(entry["stack"])]  # innermost first
        assert [frame["function"] for frame in frames if frame and frame["program"] == program.name] == [
            "deep", "leaf", "via_a", "main"], entry["stack"]
        for index, frame in enumerate(frames):
            if frame and frame["program"] == program.name:
                address = symbols[frame["function"]] + int(frame["offset"], 16)
                assert frame["line"] == addr2line(program, address - (index > 0)), (entry["stack"], index)
                ours[address] = frame["line"]
    perf_hits = perf_srclines(program, "deep", tmp_path)
    assert len(perf_hits) == 2
    differ = 0
    for hit in perf_hits:
        (ip, symbol, srcline), *callers = hit
        assert symbol == "deep" and ours[ip] == srcline
        for ip, symbol, srcline in callers:
            if symbol in symbols:
                assert srcline == addr2line(program, ip) and ours[ip] == addr2line(program, ip - 1)
                differ += srcline != ours[ip]
    assert differ == 2  # via_a's return address (lines.c:12 to perf, the call at lines.c:11 here), once a hit
