"""Stacks as a key: the hist file's stack keys and the text stream's stack lines read into one model
(outermost frame first), bounded, and printed as bpftrace, folded and JSON print them. The hist texts are
the guests' own (Debian 6.1 and 6.12, a kprobe on vfs_read with ``kptui_comm=$comm``)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kprobe_tui.aggregate.stackrun import kernel_stack_key
from kprobe_tui.commands.count import stack_keys
from kprobe_tui.errors import UserError
from kprobe_tui.stream.parser import LineParser
from kprobe_tui.stream.stacks import (
    MAX_STACKS_ENV,
    StackTable,
    add_event_stack,
    format_bpftrace,
    format_folded,
    format_json,
    frame_symbol,
    max_stacks,
    parse_hist_stacks,
)

HIST_612 = """\
# event histogram
#
# trigger info: hist:keys=common_stacktrace,kptui_comm:vals=hitcount:sort=hitcount:size=8192 [active]
#

{ common_stacktrace:
         vfs_read+0x9/0x370
         __x64_sys_pread64+0x98/0xd0
         do_syscall_64+0x87/0x1b0
         entry_SYSCALL_64_after_hwframe+0x76/0x7e
, kptui_comm: grep                                              } hitcount:          2
{ common_stacktrace:
         kprobe_ftrace_handler+0x138/0x1d0
         0xffffffffc02d90de
         vfs_read+0x9/0x370
         ksys_read+0x6f/0xf0
         do_syscall_64+0x87/0x1b0
         entry_SYSCALL_64_after_hwframe+0x76/0x7e
, kptui_comm: dd                                                } hitcount:          5

Totals:
    Hits: 7
    Entries: 2
    Dropped: 3
"""

# 6.1 spells the key "stacktrace" and closes an execname key with "]}"
HIST_61 = """\
{ stacktrace:
         do_syscall_64+0x3e/0xb0
         entry_SYSCALL_64_after_hwframe+0x6e/0xd8
 } hitcount:          4
"""

SYSCALL = ("entry_SYSCALL_64_after_hwframe+0x76", "do_syscall_64+0x87")


def test_a_hist_file_keyed_by_stack_and_comm_reads_outermost_first_without_the_probes_own_frames():
    table = StackTable()
    parse_hist_stacks(HIST_612, table, comm_key="kptui_comm", probed="vfs_read")
    assert table.counts == {
        ((*SYSCALL, "__x64_sys_pread64+0x98", "vfs_read+0x9"), "grep"): 2,
        ((*SYSCALL, "ksys_read+0x6f", "vfs_read+0x9"), "dd"): 5,
    }
    assert table.dropped == 3 and table.garbled == 0
    assert table.stacks()[("dd", *SYSCALL, "ksys_read+0x6f", "vfs_read+0x9")] == 5  # the comm folds in outermost


def test_the_older_spelling_and_a_key_with_no_comm_read_alike():
    table = StackTable()
    parse_hist_stacks(HIST_61, table)
    assert table.counts == {(("entry_SYSCALL_64_after_hwframe+0x6e", "do_syscall_64+0x3e"), None): 4}


def test_the_stack_key_is_the_spelling_the_kernels_readme_names():
    assert kernel_stack_key("\t    can be any field, or the special string 'common_stacktrace'.") == "common_stacktrace"
    assert kernel_stack_key("\t    can be any field, or the special string 'stacktrace'.") == "stacktrace"


def test_a_comm_holding_a_newline_and_a_forged_entry_are_counted_garbled_never_as_a_stack():
    forged = HIST_612.replace("kptui_comm: dd      ", "kptui_comm: d\n } hitcount: 999\n")
    table = StackTable()
    parse_hist_stacks(forged, table, comm_key="kptui_comm", probed="vfs_read")
    assert table.garbled == 1 and sum(table.counts.values()) == 2


def test_the_text_streams_stack_lines_count_like_the_kernels_table():
    lines = ["              dd-171     [000] .....    15.127797: vr: (vfs_read+0x4/0x370) c=1 kptui_comm=\"dd\"",
             "              dd-171     [000] .....    15.132111: <stack trace>",
             " => vfs_read+0x5/0x370", " => ksys_read+0x6f/0xf0", " => do_syscall_64+0x87/0x1b0",
             " => entry_SYSCALL_64_after_hwframe+0x76/0x7e"]
    parser = LineParser()
    events = parser.feed(lines * 3) + parser.flush()
    table = StackTable()
    for event in events:
        add_event_stack(table, event.stack, event.args["kptui_comm"].strip('"'), probed="vfs_read")
    assert table.counts == {((*SYSCALL, "ksys_read+0x6f", "vfs_read+0x5"), "dd"): 3}


def test_distinct_stacks_are_capped_and_the_hits_beyond_counted():
    table = StackTable(limit=2)
    for name, hits in (("a", 1), ("b", 2), ("c", 3), ("a", 4)):
        table.add((name,), count=hits)
    assert table.counts == {(("a",), None): 5, (("b",), None): 2} and table.dropped == 3 and table.capped


def test_the_bound_comes_from_the_environment_and_a_bad_one_is_refused(monkeypatch):
    monkeypatch.setenv(MAX_STACKS_ENV, "50")
    assert max_stacks() == 50
    for bad in ("lots", "0", "²", "9" * 5000):
        monkeypatch.setenv(MAX_STACKS_ENV, bad)
        with pytest.raises(UserError, match=MAX_STACKS_ENV):
            max_stacks()


def test_bpftrace_layout_folded_and_json():
    table = StackTable()
    table.add(("main", "work", "vfs_read+0x5"), "dd", 6)
    table.add(("main", "pread;x", "vfs_read+0x5"), "dd", 2)
    assert format_bpftrace(table) == ("@[\n    vfs_read+0x5\n    pread;x\n    main\n, dd]: 2\n"
                                      "@[\n    vfs_read+0x5\n    work\n    main\n, dd]: 6\n")
    assert format_folded(table) == "dd;main;pread:x;vfs_read+0x5 2\ndd;main;work;vfs_read+0x5 6\n"
    record = json.loads(format_json(table))
    assert record["stacks"][0] == {"stack": ["main", "work", "vfs_read+0x5"], "count": 6, "comm": "dd"}


def test_intervals_and_top():
    before = StackTable()
    before.add(("a",), count=2)
    now = StackTable(counts=dict(before.counts))
    now.add(("a",), count=1)
    now.add(("b",), count=5)
    assert now.since(before).counts == {(("a",), None): 1, (("b",), None): 5}
    assert now.top(1).counts == {(("b",), None): 5}


def test_frames_compare_by_function_whatever_the_offsets_form():
    assert frame_symbol("vfs_read+5") == frame_symbol("vfs_read+0x5/0x370") == frame_symbol("vfs_read") == "vfs_read"
    assert frame_symbol("nfs_file_read+0x10/0x90 [nfs]") == "nfs_file_read"


@pytest.mark.parametrize("by", ["stack,pid", "stack,stack", "stack,probe"])
def test_a_stack_is_keyed_alone_or_with_comm(by):
    assert stack_keys("stack,comm") == ("stack", "comm") and stack_keys("comm") == ()
    with pytest.raises(UserError, match="keyed alone or with comm"):
        stack_keys(by)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.data())
def test_any_mutation_of_a_hist_file_or_a_stack_in_the_stream_parses_or_is_counted_never_raised(data):
    text = HIST_612
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(text)))
        text = text[:at] + data.draw(st.text(alphabet="{}, :\n0123456789x+/abc[]hitcount", max_size=12)) + text[at + 2:]
    table = StackTable(limit=3)
    parse_hist_stacks(text, table, comm_key="kptui_comm", probed="vfs_read")
    assert len(table.counts) <= 3
    parser = LineParser()
    for event in parser.feed(text.replace("         ", " => ").splitlines()) + parser.flush():
        add_event_stack(table, event.stack)
