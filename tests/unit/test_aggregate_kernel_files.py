"""hist files and READMEs captured in the 6.1 and 6.12 guests (tests/fixtures/hist/capture_hist.sh):
the parser reads every table, our triggers find theirs, and the kernel's offer is read from README."""

from __future__ import annotations

from collections import Counter

import pytest

from kprobe_tui.aggregate.histfile import HistKey, as_signed, parse_hist
from kprobe_tui.aggregate.kernel_engine import field_number
from kprobe_tui.aggregate.model import Aggregation, Field
from kprobe_tui.aggregate.offer import KernelOffer, choose, detect
from kprobe_tui.aggregate.triggers import latency_triggers, table_trigger
from kprobe_tui.errors import UserError
from kprobe_tui.kernel.tracefs import Tracefs
from kprobe_tui.stream.filterexpr import field_kinds, field_layout
from tests.conftest import FIXTURES

KERNELS = ["6.1", "6.12"]
WORK = {"len": "len", "slen": "slen", "port": "port", "comm": "kptui_comm"}


def fixture(kernel: str, name: str) -> str:
    return (FIXTURES / "hist" / kernel / name).read_text()


def strings(kernel: str) -> frozenset[str]:
    return frozenset(name for name, kind in field_kinds(fixture(kernel, "work.format")).items() if kind == "str")


@pytest.mark.parametrize("kernel", KERNELS)
def test_every_table_of_the_work_probe(kernel):
    """aggregate values 100: comm kpt-alpha then kpt beta-2 (50 calls each), len -200..700, port 53/80."""
    tables = parse_hist(fixture(kernel, "work.hist"), strings(kernel))
    assert [table.hits for table in tables] == [100] * 4 and not any(t.unparsed or t.dropped for t in tables)
    by_comm, by_pid_port, by_comm_len, by_slen = tables
    assert by_comm.keys == (HistKey("kptui_comm"),) and by_comm.params["filter"] == "common_pid != 1"
    assert {e.key: e.hitcount for e in by_comm.entries} == {("kpt-alpha",): 50, ("kpt beta-2",): 50}
    # common_pid.execname: the comm when the pid's entry was made, for every later hit too
    assert {(e.key[0][0], e.key[1]): e.hitcount for e in by_pid_port.entries} == {("kpt-alpha", 0x3500): 50,
                                                                                 ("kpt-alpha", 0x5000): 50}
    layout = field_layout(fixture(kernel, "work.format"))
    lens = {(comm, field_number(value, layout["len"])): e.hitcount for e in by_comm_len.entries for comm, value in [e.key]}
    assert lens == {(comm, value): 5 for comm in ("kpt-alpha", "kpt beta-2") for value in range(-200, 800, 100)}
    slens = {field_number(e.key[0], layout["slen"]): e.hitcount for e in by_slen.entries}
    assert slens == {value: 10 for value in range(-200, 800, 100)}  # an s32, printed sign-extended to 64 bits


@pytest.mark.parametrize("kernel", KERNELS)
def test_our_triggers_find_their_tables(kernel):
    tables = parse_hist(fixture(kernel, "work.hist"), strings(kernel))
    count = table_trigger(Aggregation("count", keys=(Field("comm"),)), "kptcap", "work", WORK, "common_pid != 1")
    hist = table_trigger(Aggregation("hist", keys=(Field("comm"),), value=Field("len")), "kptcap", "work", WORK, "")
    assert count.text() == "hist:keys=kptui_comm:vals=hitcount:size=8192 if common_pid != 1"
    assert [t for t in tables if count.matches(t)] == [tables[0]]
    assert [t for t in tables if hist.matches(t)] == [tables[2]]
    latency = latency_triggers(Aggregation("latency", keys=(Field("comm"),)), ("kptcap", "nap"),
                               ("kptcap", "nap__return"), "kptui_1__lat1", "1", "", "", comm_field="kptui_comm")
    synthetic = parse_hist(fixture(kernel, "nap_latency.hist"), frozenset({"comm"}))
    returns = parse_hist(fixture(kernel, "nap_return.hist"))
    assert [latency.table.matches(t) for t in synthetic] == [True, False]
    assert [latency.extremes.matches(t) for t in synthetic] == [False, True]
    assert [latency.returns.matches(t) for t in returns] == [True, False]
    assert [latency.ret.matches(t) for t in returns] == [False, True]
    assert latency.synthetic.definition() == "kptui_1__lat1 u64 lat; u64 lat1; char comm[]"
    assert latency.ret.handler == "onmatch(kptcap.nap).trace(kptui_1__lat1,$lt1,$lb1,kptui_comm)"


@pytest.mark.parametrize("kernel", KERNELS)
def test_latency_tables_give_buckets_sum_min_max_and_unmatched(kernel):
    """aggregate recurse 2 with latency in ns: rec(3) twice; the innermost sleeps 2 ms."""
    table, extremes = parse_hist(fixture(kernel, "rec_latency.hist"))
    [returns, matched] = parse_hist(fixture(kernel, "rec_return.hist"))
    assert table.hits == 2 and returns.hits == 8 and matched.hits == 2  # 6 outer returns found no entry
    latencies = sorted(latency for e in extremes.entries for latency in [e.key[0]] * e.hitcount)
    assert len(latencies) == 2 and 2_000_000 <= latencies[0] <= latencies[1] < 20_000_000  # 2 ms asked; timers run late
    assert sum(e.values["lat"] for e in table.entries) == sum(latencies)
    # lat1.log2, the log2 of lat+1, is bpftrace's bucket of lat: N for [2^(N-1), 2^N)
    assert {e.key[0]: e.hitcount for e in table.entries} == Counter(latency.bit_length() for latency in latencies)


@pytest.mark.parametrize("kernel", KERNELS)
def test_latency_per_comm_in_microseconds(kernel):
    table, extremes = parse_hist(fixture(kernel, "nap_latency.hist"), frozenset({"comm"}))
    assert {e.key[0] for e in table.entries} == {"kptcap_aggregat"}  # the comm at the return, cut to 15 by the kernel
    assert sum(e.hitcount for e in table.entries) == sum(e.hitcount for e in extremes.entries) == 4
    assert {e.key[0] for e in extremes.entries} == {"kptcap_aggregat"} and min(e.key[1] for e in extremes.entries) >= 5000


def test_signed_numbers_as_the_field_has_them():
    assert as_signed(18446744073709551416) == -200 and as_signed(200) == 200
    assert field_number(18446744073709551416, (4, True)) == -200  # sign-extended s32
    assert field_number(4294967096, (4, True)) == -200  # or not
    assert field_number(18446744073709551416, (8, False)) == 18446744073709551416


def test_parser_keeps_going_past_lines_that_fit_nothing():
    text = fixture("6.1", "work.hist").replace("{ slen:        300 }", "{ slen: garbage }", 1)
    tables = parse_hist(text + "\nstray line\n", strings("6.1"))
    assert tables[3].unparsed == 2 and len(tables[3].entries) == 9 and tables[3].hits == 100


@pytest.mark.parametrize("kernel", KERNELS)
def test_the_offer_is_read_from_readme(kernel, tmp_path):
    (tmp_path / "README").write_text(fixture(kernel, "README"))
    (tmp_path / "synthetic_events").write_text("")
    (tmp_path / "kprobe_profile").write_text("")
    offer = detect(Tracefs(tmp_path, writable=False))
    assert offer == KernelOffer(hist_triggers=True, synthetic_events=True, hist_constants=True, kprobe_profile=True,
                                uprobe_profile=False, synthetic_stacks=kernel == "6.12")  # a stack field: 6.4+


def test_engine_choice_says_why():
    none = KernelOffer(False, False, False, False, True)
    full = KernelOffer(True, True, True, True, True)
    count = Aggregation("count", keys=(Field("comm"),))
    latency = Aggregation("latency")
    choice = choose("auto", count, none, profile_only=False, uprobes=True, filter_refusal=None)
    assert choice.engine == "user" and "no hist triggers" in choice.reason
    assert choose("auto", count, none, profile_only=True, uprobes=True, filter_refusal=None).method == "profile"
    assert choose("auto", count, full, profile_only=False, uprobes=False, filter_refusal=None).method == "hist"
    refused = choose("auto", count, full, profile_only=False, uprobes=False, filter_refusal="len ~ 'x': not a number")
    assert refused.engine == "user" and "cannot apply the filter" in refused.reason
    old = KernelOffer(True, True, False, True, True)
    assert "numeric constants" in choose("auto", latency, old, profile_only=False, uprobes=False,
                                          filter_refusal=None).reason
    with pytest.raises(UserError, match="--engine kernel: this kernel has no synthetic events"):
        choose("kernel", latency, KernelOffer(True, False, True, True, True), profile_only=False, uprobes=False,
               filter_refusal=None)
    assert choose("user", count, full, profile_only=True, uprobes=False, filter_refusal=None).engine == "user"


def test_a_latency_by_stack_is_timed_in_the_kernel_where_a_synthetic_event_takes_a_stack_and_the_key_fits():
    by_stack = Aggregation("latency", keys=(Field("stack"),))
    with_stacks = KernelOffer(True, True, True, True, True, synthetic_stacks=True)
    assert choose("auto", by_stack, with_stacks, profile_only=False, uprobes=False, filter_refusal=None).method == "hist"
    before_6_4 = choose("auto", by_stack, KernelOffer(True, True, True, True, True), profile_only=False, uprobes=False,
                        filter_refusal=None)
    assert before_6_4.engine == "user" and "take no stack" in before_6_4.reason
    with pytest.raises(UserError, match="--engine kernel: a kernel table key holds at most 384 bytes"):
        choose("kernel", Aggregation("latency", keys=(Field("stack"), Field("comm"))), with_stacks, profile_only=False,
               uprobes=False, filter_refusal=None)
