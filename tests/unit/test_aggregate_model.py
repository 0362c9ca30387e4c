"""The aggregation model, its summary and its text: buckets as bpftrace draws them, exact statistics."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from kprobe_tui.aggregate.model import Aggregation, Field, Linear, Log2, parse_field, parse_linear
from kprobe_tui.aggregate.result import summarize
from kprobe_tui.aggregate.tally import Tally
from kprobe_tui.aggregate.text import bucket_label, histogram_lines, power_label, render
from kprobe_tui.errors import UserError


def test_log2_buckets_are_bpftraces_hist():
    """bpftrace: [0], [1], [2, 4), [4, 8)... and (..., 0) for negative values."""
    cases = {0: (0, 1), 1: (1, 2), 2: (2, 4), 3: (2, 4), 4: (4, 8), 7: (4, 8), 8: (8, 16), 1023: (512, 1024),
             1024: (1024, 2048), -1: (None, 0), -(1 << 40): (None, 0), 1 << 40: (1 << 40, 1 << 41)}
    for value, bounds in cases.items():
        assert Log2.bounds(Log2.index(value)) == bounds, value
    rng = random.Random(11)
    for value in (rng.randrange(-10**12, 10**12) for _ in range(2000)):
        low, high = Log2.bounds(Log2.index(value))
        assert (low is None or low <= value) and value < high


def test_linear_buckets_are_lhist_with_underflow_and_overflow():
    scheme = Linear(10, 50, 10)
    assert [scheme.bounds(scheme.index(v)) for v in (9, 10, 19, 20, 49, 50, 10**9)] == [
        (None, 10), (10, 20), (10, 20), (20, 30), (40, 50), (50, None), (50, None)]
    assert parse_linear("0,1000,100") == Linear(0, 1000, 100)
    assert parse_linear("-100,0x100,4") == Linear(-100, 256, 4)


@pytest.mark.parametrize("text, words", [
    ("0,100", "MIN,MAX,STEP"), ("a,b,c", "MIN,MAX,STEP"), ("0,100,0", "must be positive"),
    ("100,0,10", "MAX must be above MIN"), ("0,105,10", "not a multiple"), ("0,100000,1", "buckets"),
])
def test_linear_refusals_say_what_to_write(text, words):
    with pytest.raises(UserError) as refused:
        parse_linear(text)
    assert words in str(refused.value)


def test_fields_and_byte_order():
    port = parse_field("ntohs(dport)")
    assert (port.name, port.transform, port.label) == ("dport", "ntohs", "ntohs(dport)")
    assert port.shown(0x3500) == 53 and parse_field("ntohl(addr)").shown(0x0100007F) == 0x7F000001
    assert parse_field("comm").is_header and not parse_field("len").is_header
    for bad in ("rec->len", "ntohs(comm)", "1x"):
        with pytest.raises(UserError):
            parse_field(bad)


def test_aggregation_refusals():
    with pytest.raises(UserError, match="at most 3"):
        Aggregation("count", keys=tuple(Field(n) for n in ("comm", "pid", "probe", "len")))
    with pytest.raises(UserError, match="named twice"):
        Aggregation("count", keys=(Field("comm"), Field("comm")))
    with pytest.raises(UserError, match="keyed by comm, pid or stack"):
        Aggregation("latency", keys=(Field("len"),))
    with pytest.raises(UserError, match="not a numeric argument"):
        Aggregation("hist", value=Field("comm"))
    assert Aggregation("hist", keys=(Field("comm"), Field("port")), value=Field("len")).arguments() == ["len", "port"]


def _exact(values: dict, key: tuple = ()) -> Tally:
    tally = Tally()
    tally.cell(key).add_values(Counter(values))
    return tally


def test_summary_is_exact_and_draws_every_bucket_between():
    aggregation = Aggregation("hist", value=Field("len"))
    result = summarize(aggregation, _exact({-5: 1, 0: 2, 3: 4, 40: 1}), "user", 10.0, 12.5)
    assert (result.count, result.total.sum, result.total.min, result.total.max) == (8, 47, -5, 40)
    assert result.total.avg == 47 / 8 and result.seconds == 2.5
    assert [(b.low, b.high, b.count) for b in result.buckets] == [
        (None, 0, 1), (0, 1, 2), (1, 2, 0), (2, 4, 4), (4, 8, 0), (8, 16, 0), (16, 32, 0), (32, 64, 1)]


def test_summary_keys_top_n_and_byte_order():
    aggregation = Aggregation("count", keys=(Field("dport", "ntohs"),), top=2)
    tally = Tally()
    for port, hits in ((0x3500, 7), (0x5000, 5), (0xBB01, 1)):
        tally.count((port,), hits)
    result = summarize(aggregation, tally, "kernel", 0, 1)
    assert [(entry.key, entry.count) for entry in result.entries] == [((53,), 7), ((80,), 5)]
    assert result.others == 1 and result.count == 13
    record = result.to_json()
    assert record["entries"] == [{"key": {"ntohs(dport)": 53}, "count": 7}, {"key": {"ntohs(dport)": 80}, "count": 5}]
    assert record["engine"] == "kernel" and "buckets" not in record and "sum" not in record


def test_json_of_a_keyed_histogram_and_of_latency():
    aggregation = Aggregation("hist", keys=(Field("comm"),), value=Field("len"), buckets=Linear(0, 20, 10))
    tally = _exact({5: 2, 15: 1}, ("cat",))
    tally.cell(("sh",)).add_values(Counter({25: 3}))
    record = summarize(aggregation, tally, "user", 1.0, 2.0).to_json()
    assert record["buckets"] == [{"low": 0, "high": 10, "count": 2}, {"low": 10, "high": 20, "count": 1},
                                 {"low": 20, "high": None, "count": 3}]
    assert record["entries"][1] == {"key": {"comm": "sh"}, "count": 3, "sum": 75, "min": 25, "max": 25, "avg": 25.0,
                                    "buckets": [{"low": 20, "high": None, "count": 3}]}
    latency = Aggregation("latency", unit="ms")
    tally = Tally(unmatched=4, lost=2)
    cell = tally.cell(())
    cell.add_grouped(4, 3, 30)  # three calls in [8, 16) ms summing 30, as a kernel log2 table gives them
    cell.extend(9, 11)
    record = summarize(latency, tally, "kernel", 0, 1).to_json()
    assert record["unit"] == "ms" and record["value"] == "msecs"
    assert (record["count"], record["sum"], record["min"], record["max"], record["avg"]) == (3, 30, 9, 11, 10.0)
    assert record["buckets"] == [{"low": 8, "high": 16, "count": 3}]
    assert record["unmatched"] == 4 and record["lost"] == 2 and "entries" not in record


def test_tallies_of_intervals_merge_into_the_whole():
    first, second = _exact({1: 1, 9: 2}, ("a",)), _exact({9: 1, 100: 1}, ("a",))
    second.dropped = 3
    whole = first.copy()
    whole.merge(second)
    cell = whole.cells[("a",)]
    assert (cell.count, cell.total, cell.low, cell.high, whole.dropped) == (5, 128, 1, 100, 3)
    assert cell.values == Counter({1: 1, 9: 3, 100: 1}) and first.cells[("a",)].count == 3


def test_text_is_bpftraces_layout():
    assert [power_label(v) for v in (0, 1, 512, 1024, 3 << 20, 1 << 30, 1000)] == ["0", "1", "512", "1K", "3M", "1G", "1000"]
    aggregation = Aggregation("latency")
    lines = render(summarize(aggregation, _exact({0: 1, 600: 3, 1500: 6}), "user", 0, 1), aggregation)
    assert lines[0] == "@usecs:"
    assert lines[1] == "[0]                     1 |@@@@@@@@                                            |"
    assert lines[2].startswith("[1]                     0 |")
    assert lines[-2] == "[1K, 2K)                6 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|"
    assert lines[-1] == "count 10, avg 1080.0, min 0, max 1500, sum 10800 (us)"
    assert bucket_label(summarize(Aggregation("hist", value=Field("v"), buckets=Linear(0, 10, 5)),
                                  _exact({-1: 1}), "user", 0, 1).buckets[0], linear=True) == "(..., 0)"
    assert histogram_lines((), linear=False) == ["(no hits)"]


def test_count_table_escapes_what_came_from_the_traced_system():
    aggregation = Aggregation("count", keys=(Field("comm"), Field("pid")))
    tally = Tally()
    tally.count(("evil\x1b[2J", 7), 3)
    tally.count(("cat", 8), 9)
    lines = render(summarize(aggregation, tally, "user", 0, 1), aggregation, escape=lambda s: s.replace("\x1b", "\\x1b"))
    assert lines[0].split() == ["COMM", "PID", "COUNT"]
    assert lines[1].split()[:3] == ["evil\\x1b[2J", "7", "3"] and lines[2].split()[:3] == ["cat", "8", "9"]
    assert not any("\x1b" in line for line in lines)


def test_buckets_counted_a_block_at_a_time_are_those_of_each_value():
    """Log2.counts/Linear.counts (the user-space engine's fast path) against index() value by value."""
    rng = random.Random(11)
    schemes = [Log2(), Linear(-100, 200, 50), Linear(0, 1000, 1)]
    for _ in range(2000):
        values = [rng.choice([rng.randrange(-10**6, 10**6), rng.randrange(-300, 300), 0, -1, 1, 1 << 40, -(1 << 40)])
                  for _ in range(rng.randrange(1, 40))]
        for scheme in schemes:
            assert scheme.counts(values, min(values), max(values)) == Counter(map(scheme.index, values)), (scheme, values)
