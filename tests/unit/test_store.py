"""The bounded store: ring semantics, drop counting, the filtered index; and exporting what it shows."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from kprobe_tui.errors import UserError
from kprobe_tui.stream.export import CSV_COLUMNS, export
from kprobe_tui.stream.parser import Event
from kprobe_tui.stream.store import EventStore


def make(n: int, start: int = 0) -> list[Event]:
    return [Event(float(i), i % 2, 1000 + i, None, "prog", "", "ev" if i % 3 else "other", f"(0x1) n={i}")
            for i in range(start, start + n)]


def n_of(events) -> list[int]:
    return [e.args["n"] for e in events]


def test_bounded_ring_counts_drops_and_keeps_the_newest():
    store = EventStore(capacity=5)
    store.extend(make(3))
    assert (len(store), store.dropped, n_of(store.view_rows(0, 10))) == (3, 0, [0, 1, 2])
    store.extend(make(9, start=3))
    assert (len(store), store.total, store.dropped, store.oldest) == (5, 12, 7, 7)
    assert n_of(store.view_rows(0, 10)) == [7, 8, 9, 10, 11]
    assert store.get(6) is None and store.get(12) is None and store.get(7).args["n"] == 7
    assert store.view_row(4).args["n"] == 11 and store.view_row(5) is None


def test_filter_indexes_matches_and_follows_the_ring():
    store = EventStore(capacity=10)
    store.extend(make(10))
    store.set_filter(lambda e: e.event == "ev")
    assert n_of(store.view_rows(0, 100)) == [1, 2, 4, 5, 7, 8]
    store.extend(make(6, start=10))  # 0..5 leave the ring
    assert n_of(store.view_rows(0, 100)) == [7, 8, 10, 11, 13, 14]
    assert store.view_len() == 6 and store.view_row(2).args["n"] == 10
    store.set_filter(None)
    assert store.view_len() == 10 and store.view_row(0).args["n"] == 6


def test_index_trimming_stays_correct_over_many_wraps():
    store = EventStore(capacity=1000)
    store.set_filter(lambda e: e.args["n"] % 7 == 0)
    for chunk in range(100):
        store.extend(make(500, start=chunk * 500))
    expected = [n for n in range(49_000, 50_000) if n % 7 == 0]
    assert n_of(store.view_rows(0, store.view_len())) == expected
    assert store.dropped == 49_000 and store.matches(make(1, start=14)[0]) and not store.matches(make(1, 15)[0])


def test_export_jsonl_csv_and_a_full_disk(tmp_path):
    events = make(3) + [Event(0.0, -1, 0, None, "", "", "", "garbage line")]
    assert export(events, tmp_path / "out.jsonl", "jsonl") == 4
    records = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert records[1]["args"] == {"n": 1} and records[1]["pid"] == 1001 and records[3] == {"raw": "garbage line"}
    assert export(events[:2], tmp_path / "out.csv", "csv") == 2
    rows = list(csv.reader((tmp_path / "out.csv").open()))
    assert rows[0] == CSV_COLUMNS and rows[2][:4] == ["1.000000", "1", "prog", "1001"] and rows[2][-1] == "n=1"
    with pytest.raises(UserError) as full:
        export(make(20_000), Path("/dev/full"), "jsonl")
    assert "No space left on device" in full.value.message and "free some space" in full.value.hint
    with pytest.raises(UserError, match="unknown export format 'xml'"):
        export(events, tmp_path / "out.xml", "xml")
