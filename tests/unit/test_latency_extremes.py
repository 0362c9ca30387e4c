"""The kernel engine's latency minimum and maximum, read from hist files as the 6.1 and 6.12 guests print
them (tests/fixtures/hist/*/nap_latency.hist): this machine's kernel has no hist triggers, and a table
full of distinct latencies is made here by writing what the kernel shows then."""

from __future__ import annotations

from kprobe_tui.aggregate.kernel_engine import KernelHistEngine
from kprobe_tui.aggregate.model import Aggregation
from kprobe_tui.aggregate.triggers import latency_triggers
from kprobe_tui.kernel.tracefs import Tracefs


def _table(trigger: str, lines: list[str], dropped: int = 0) -> str:
    hits = sum(int(line.split("hitcount:")[1].split()[0]) for line in lines)
    return "\n".join(["# event histogram", "#", f"# trigger info: {trigger} [active]", "#", "", *lines, "",
                      "Totals:", f"    Hits: {hits}", f"    Entries: {len(lines)}", f"    Dropped: {dropped}", "", ""])


def _collect(tmp_path, buckets: list[tuple[int, int, int]], latencies: list[tuple[int, int]], dropped: int = 0):
    """One collect() over a log2 table of (bucket, hits, sum) and an exact table of (latency, hits)."""
    engine = KernelHistEngine(Tracefs(tmp_path), Aggregation("latency", unit="us"), [], {}, {})
    plan = latency_triggers(engine.aggregation, ("kptcap", "nap"), ("kptcap", "nap__return"), "kptui_1__lat1", "1", "", "")
    engine._latency = plan
    events = tmp_path / "instances" / engine.instance.name / "events"
    (events / "synthetic" / "kptui_1__lat1").mkdir(parents=True)
    (events / "synthetic" / "kptui_1__lat1" / "hist").write_text(
        _table("hist:keys=lat1.log2:vals=hitcount,lat:sort=hitcount:size=2048",
               [f"{{ lat1: ~ 2^{bucket:<2} }} hitcount: {hits:10}  lat: {total:10}" for bucket, hits, total in buckets])
        + _table("hist:keys=lat:vals=hitcount:sort=hitcount:size=8192",
                 [f"{{ lat: {latency:10} }} hitcount: {hits:10}" for latency, hits in latencies], dropped))
    (events / "kptcap" / "nap__return").mkdir(parents=True)
    (events / "kptcap" / "nap__return" / "hist").write_text(
        _table("hist:keys=common_type:vals=hitcount:sort=hitcount:size=2048",
               [f"{{ common_type: 1234 }} hitcount: {sum(hits for _, hits, _ in buckets):10}"]))
    [cell] = engine.collect().cells.values()
    return cell


def test_a_latency_of_zero_is_the_minimum(tmp_path):
    cell = _collect(tmp_path, [(0, 3, 0), (4, 2, 21)], [(0, 3), (10, 1), (11, 1)])
    assert (cell.count, cell.total, cell.low, cell.high) == (5, 21, 0, 11)


def test_a_full_exact_table_leaves_the_end_buckets_bounds(tmp_path):
    """5 and 6 in [4, 8) came after the exact table was full: the minimum is the bucket's bound, never 20."""
    cell = _collect(tmp_path, [(3, 2, 11), (5, 1, 20)], [(20, 1)], dropped=2)
    assert (cell.count, cell.total, cell.low, cell.high) == (3, 31, 4, 20)
