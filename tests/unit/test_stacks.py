"""Stacks as a key: the hist file's stack keys and the text stream's stack lines read into one model
(outermost frame first), bounded, and printed as bpftrace, folded and JSON print them. The hist texts are
the guests' own (Debian 6.1 and 6.12, a kprobe on vfs_read with ``kptui_comm=$comm``)."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kprobe_tui.aggregate.histfile import table_texts
from kprobe_tui.aggregate.model import Aggregation, Field
from kprobe_tui.aggregate.result import summarize
from kprobe_tui.aggregate.stackrun import kernel_stack_key
from kprobe_tui.aggregate.tally import Tally
from kprobe_tui.aggregate.text import render
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
    parse_hist_stack_buckets,
    parse_hist_stacks,
)
from kprobe_tui.textsafe import printable

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

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


def mutated(data, text: str, alphabet: str) -> str:
    """``text`` with one to four places overwritten by short runs of ``alphabet``."""
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(text)))
        text = text[:at] + data.draw(st.text(alphabet=alphabet, max_size=12)) + text[at + 2:]
    return text


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.data())
def test_any_mutation_of_a_hist_file_or_a_stack_in_the_stream_parses_or_is_counted_never_raised(data):
    text = mutated(data, HIST_612, "{}, :\n0123456789x+/abc[]hitcount")
    table = StackTable(limit=3)
    parse_hist_stacks(text, table, comm_key="kptui_comm", probed="vfs_read")
    assert len(table.counts) <= 3
    parser = LineParser()
    for event in parser.feed(text.replace("         ", " => ").splitlines()) + parser.flush():
        add_event_stack(table, event.stack)


# The 6.1 guest's table of `hist:keys=stacktrace,kptui_comm,n` on a kprobe on vfs_read (n=%dx:s64 here)
HIST_VALUE_61 = """\
{ stacktrace:
         kprobe_ftrace_handler+0x108/0x1b0
         0xffffffffc02800c8
         vfs_read+0x5/0x310
         ksys_read+0x6b/0xf0
, kptui_comm: dd, n: 17                                         , n:         17} hitcount:          2
{ stacktrace:
         vfs_read+0x5/0x310
         ksys_read+0x6b/0xf0
, kptui_comm: dd                                                , n: 18446744073709551615} hitcount:          1
{ stacktrace:
         vfs_read+0x5/0x310
, kptui_comm: dd                                                , n:        ²} hitcount:          9
"""


def test_a_hist_file_keyed_by_stack_comm_and_value_gives_each_stack_its_values():
    """The value is the last key: a comm holding ``, n: 17`` cannot shift it; a signed field's -1 prints as
    2^64-1 and is read back by the field's sign; a value that is no number is counted garbled."""
    table = StackTable()
    parse_hist_stacks(HIST_VALUE_61, table, comm_key="kptui_comm", probed="vfs_read", value_key="n",
                      value_of=lambda printed: printed - (1 << 64) if printed >> 63 else printed)
    first, second = (("ksys_read+0x6b", "vfs_read+0x5"), "dd, n: 17"), (("ksys_read+0x6b", "vfs_read+0x5"), "dd")
    assert table.counts == {first: 2, second: 1}
    assert table.values == {first: {17: 2}, second: {-1: 1}}
    assert table.garbled == 1


def test_a_stacks_values_follow_it_through_intervals_top_and_renaming():
    before = StackTable()
    before.add(("a",), value=3)
    now = StackTable(counts=dict(before.counts), values={key: Counter(values) for key, values in before.values.items()})
    now.add(("a",), value=3)
    now.add(("a",), value=5, count=2)
    now.add(("b",), value=1, count=5)
    assert now.since(before).values == {(("a",), None): {3: 1, 5: 2}, (("b",), None): {1: 5}}
    assert now.top(1).values == {(("b",), None): {1: 5}}
    assert now.renamed(str.upper).values == {(("A",), None): {3: 2, 5: 2}, (("B",), None): {1: 5}}
    full = StackTable(limit=1)
    full.add(("a",), value=1)
    full.add(("b",), value=2)
    assert full.values == {(("a",), None): {1: 1}} and full.dropped == 1


# The 6.12 guest's synthetic event of `latency vfs_read --by stack`: its two tables (log2 buckets with sums, exact latencies)
LATENCY_BY_STACK_612 = (FIXTURES / "hist" / "6.12" / "vfs_read_latency_by_stack.hist").read_text()
PIPE = ("entry_SYSCALL_64_after_hwframe+0x76", "do_syscall_64+0x87", "ksys_read+0xbb", "vfs_read+0x9")
FILE = ("entry_SYSCALL_64_after_hwframe+0x76", "do_syscall_64+0x87", "ksys_read+0x6f", "vfs_read+0x9")


def test_a_synthetic_events_stack_field_keys_log2_buckets_with_their_sums():
    """The first frame on the key's line (``{ stack.stacktrace   frame``), the probe's own frames left out."""
    buckets_text, exact_text = [text for _, text in table_texts(LATENCY_BY_STACK_612)]
    table = StackTable()
    parse_hist_stack_buckets(buckets_text, table, None, "vfs_read", "lat1", "lat")
    assert table.counts == {(PIPE, None): 3, (FILE, None): 4} and table.garbled == 0
    assert table.grouped == {(PIPE, None): {16: 1, 15: 2}, (FILE, None): {8: 1, 6: 3}}
    assert table.sums == {(PIPE, None): 53586 + 47359, (FILE, None): 134 + 124}
    exact = StackTable()
    parse_hist_stacks(exact_text, exact, None, "vfs_read", "lat")
    assert exact.values == {(PIPE, None): {53586: 1, 23409: 1, 23950: 1}, (FILE, None): {134: 1, 38: 1, 53: 1, 33: 1}}


def test_a_stacks_buckets_and_sums_follow_it_through_intervals_top_and_renaming():
    before = StackTable()
    before.add_grouped(("a",), None, 3, 2, 11)
    now = replace(before, counts=dict(before.counts), grouped={key: Counter(c) for key, c in before.grouped.items()},
                  sums=Counter(before.sums))
    now.add_grouped(("a",), None, 4, 1, 9)
    now.add_grouped(("b",), "x", 1, 5, 5)
    assert now.since(before).grouped == {(("a",), None): {4: 1}, (("b",), "x"): {1: 5}}
    assert now.since(before).sums == {(("a",), None): 9, (("b",), "x"): 5}
    assert now.top(1).grouped == {(("b",), "x"): {1: 5}} and now.top(1).sums == {(("b",), "x"): 5}
    assert now.renamed(str.upper).sums == {(("A",), None): 20, (("B",), "X"): 5}


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.data())
def test_any_mutation_of_a_synthetic_stack_table_parses_or_is_counted_never_raised(data):
    text = mutated(data, LATENCY_BY_STACK_612, "{}, :~^\n0123456789x+/abc[]hitcountlat.stack")
    table = StackTable(limit=3)
    parse_hist_stack_buckets(text, table, None, "vfs_read", "lat1", "lat")
    assert len(table.counts) <= 3 and set(table.grouped) <= set(table.counts)


def test_a_histogram_keyed_by_stack_prints_its_frames_as_bpftrace_prints_kstack():
    histogram = Aggregation("hist", keys=(Field("stack"), Field("comm")), value=Field("n"))
    tally = Tally()
    tally.cell((("do_syscall_64+0x3e", "vfs_read+0x5"), "d\nd")).add_values({1: 2, 5: 1})
    lines = render(summarize(histogram, tally, "kernel", 0.0, 1.0), histogram, escape=printable)
    assert lines[:4] == ["@n[", "    vfs_read+0x5", "    do_syscall_64+0x3e", ", d\\nd]:"]
    assert lines[4].startswith("[1]") and lines[5].startswith("[2, 4)") and lines[6].startswith("[4, 8)")
