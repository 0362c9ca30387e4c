"""``hist -x PROG FUNC VALUE --by stack`` on this machine's uprobes: one histogram a call path, as bpftrace's
``@[ustack] = hist(arg0)`` gives (the user-space engine: this kernel has no hist triggers;
tests/kernel/test_stack_hist_guest.py checks the kernel's table against bpftrace)."""

from __future__ import annotations

import signal
import subprocess
from collections import Counter

import pytest

from kprobe_tui.stream.stacks import frame_symbol
from tests.aggregate_cli import Aggregation, buckets
from tests.live.test_stacks_live import VIA_A, VIA_B, build

pytestmark = pytest.mark.live


def merged(entries: list[dict]) -> tuple:
    """Count, sum, min, max and buckets of several stacks' histograms taken together."""
    together: Counter = Counter()
    for entry in entries:
        together.update(buckets(entry))
    return (sum(entry["count"] for entry in entries), sum(entry["sum"] for entry in entries),
            min(entry["min"] for entry in entries), max(entry["max"] for entry in entries), dict(together))


def test_a_histogram_by_stack_gives_each_call_path_its_values(tmp_path, tracefs_root):
    """leaf(i) is called with i = 0..VIA_A-1 through via_a and i = 0..VIA_B-1 through via_b."""
    program = build(tmp_path, "kpt_stack_hist", "-fno-omit-frame-pointer")
    run = Aggregation("hist", "-x", str(program), "leaf", "x=%di:s32", "--by", "stack")
    text = Aggregation("hist", "-x", str(program), "leaf", "x=%di:s32", "--by", "stack,comm", json_output=False)
    try:
        for each in (run, text):
            assert "user engine: a uprobe's stack is the program's" in each.ready()
        subprocess.run([str(program)], check=True)
        record = run.final()
        assert any(line.startswith("kprobe-tui: leaf: ~") and "hits/s" in line for line in run.stderr_lines), run.stderr_lines
        assert record["kind"] == "hist" and record["count"] == VIA_A + VIA_B
        paths: dict[tuple, list] = {}  # by function: main's loop calls via_b from unrolled call sites
        for entry in record["entries"]:
            paths.setdefault(tuple(frame_symbol(frame) for frame in entry["key"]["stack"])[-3:], []).append(entry)
        assert set(paths) == {("main", "via_a", "leaf"), ("main", "via_b", "leaf")}
        assert merged(paths["main", "via_a", "leaf"]) == (VIA_A, 10, 0, 4, {(0, 1): 1, (1, 2): 1, (2, 4): 2, (4, 8): 1})
        assert merged(paths["main", "via_b", "leaf"]) == (VIA_B, 3, 0, 2, {(0, 1): 1, (1, 2): 1, (2, 4): 1})
        assert record["buckets"] == [{"low": 0, "high": 1, "count": 2}, {"low": 1, "high": 2, "count": 2},
                                     {"low": 2, "high": 4, "count": 3}, {"low": 4, "high": 8, "count": 1}]

        text.proc.send_signal(signal.SIGINT)
        out, _ = text.proc.communicate(timeout=300)
        lines = out.splitlines()
        heads = [at for at, line in enumerate(lines) if line == "@x["]
        assert len(heads) >= 2, out  # the path with the most hits first, as hist prints its keys
        first = lines[heads[0]:lines.index(f", {program.name}]:", heads[0]) + 1]
        assert first[1] == f"    leaf+0x0 [{program.name}]" and first[2].startswith("    via_a+0x")  # innermost first
        bars = lines[heads[0] + len(first):heads[0] + len(first) + 5]
        assert [line.split("|")[0].split() for line in bars[:4]] == [["[0]", "1"], ["[1]", "1"], ["[2,", "4)", "2"],
                                                                      ["[4,", "8)", "1"]], out
        assert bars[4] == "count 5, avg 2.0, min 0, max 4, sum 10"
    finally:  # a failed check leaves no run behind (its probe and instance go with it)
        for each in (run, text):
            if each.proc.poll() is None:
                each.finish()
