"""The profile core: uprobe_profile on real uprobes here, kprobe_profile as the 6.12 guest printed it.

The in-guest test (tests/kernel/test_profile_guest.py) reads a real kprobe_profile after firing
kprobes; here its format is checked on the lines it printed, and uprobe counts on this machine.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kprobe_tui.kernel.profile import (
    ProbeHits,
    attribute,
    parse_kprobe_profile,
    parse_uprobe_profile,
    rates,
    read_hits,
)
from kprobe_tui.kernel.tracefs import Tracefs
from kprobe_tui.probes.symbols import ElfSymbols

C_PROGRAM = Path(__file__).parents[1] / "live" / "c" / "basic.c"
GROUPS = ("kptuiprof_a", "kptuiprof_b")

# Two kprobes named "open" in two groups: the first line as debian-6.12 printed it (the guest test's
# output), the second in the kernel's own format ("  %-44s %15lu %15lu") with counts.
KPROBE_PROFILE_612 = ("  open                                                       0               0\n"
                      f"  {'open':<44} {17:>15} {2:>15}\n")


def test_kprobe_profile_lines_are_event_hits_misses():
    assert parse_kprobe_profile(KPROBE_PROFILE_612) == [ProbeHits("open", 0, 0), ProbeHits("open", 17, 2)]
    assert parse_kprobe_profile("garbage\n  half 1\n") == []


def test_same_names_in_two_groups_go_by_order_and_a_vanished_probe_is_skipped():
    entries = parse_kprobe_profile(KPROBE_PROFILE_612)
    assert attribute(entries, [("a", "open"), ("b", "open")]) == {"a/open": entries[0], "b/open": entries[1]}
    # b/open was removed between the two reads: c/open must not get its counts twice over
    assert attribute(entries[:1], [("c", "other"), ("a", "open")]) == {"a/open": entries[0]}


def test_uprobe_profile_file_names_may_hold_spaces():
    text = "  /tmp/my prog/x add3                                              12\n"
    assert parse_uprobe_profile(text) == [ProbeHits("add3", 12, None, "/tmp/my prog/x")]


def test_rates_are_per_second_and_restart_when_a_probe_is_recreated():
    before = {"g/a": ProbeHits("a", 10, 0), "g/b": ProbeHits("b", 50, 0)}
    after = {"g/a": ProbeHits("a", 30, 0), "g/b": ProbeHits("b", 4, 0), "g/new": ProbeHits("new", 9, 0)}
    assert rates(before, after, 2.0) == {"g/a": 10.0, "g/b": 2.0}


@pytest.mark.live
def test_uprobe_hits_counted_by_the_kernel_per_group(tracefs_root, tmp_path):
    """Same event name in two groups; only the enabled one counts, once per call of add3()."""
    binary = tmp_path / "basic"
    subprocess.run(["gcc", "-O1", "-o", str(binary), str(C_PROGRAM)], check=True)
    offset = ElfSymbols(binary).function("add3").file_offset
    top = Tracefs(tracefs_root)
    for group in GROUPS:
        top.write("uprobe_events", f"p:{group}/add3 {binary}:0x{offset:x}\n")
    try:
        top.write(f"events/{GROUPS[1]}/add3/enable", "1", append=False)
        for run in range(4):
            subprocess.run([str(binary), str(run)], check=True, capture_output=True)
        top.write(f"events/{GROUPS[1]}/add3/enable", "0", append=False)
        hits = read_hits(top)
        assert hits[f"{GROUPS[0]}/add3"] == ProbeHits("add3", 0, None, str(binary))
        assert hits[f"{GROUPS[1]}/add3"] == ProbeHits("add3", 4, None, str(binary))
    finally:
        for group in GROUPS:
            top.write("uprobe_events", f"-:{group}/add3\n")
    assert not any(str(binary) in line for line in (tracefs_root / "uprobe_events").read_text().splitlines())
