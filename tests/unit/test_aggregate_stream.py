"""The user-space aggregator: its fast path gives exactly what the general path (one Event per line) gives."""

from __future__ import annotations

import random

import pytest

from kprobe_tui.aggregate.model import Aggregation, Field, Linear
from kprobe_tui.aggregate.result import summarize
from kprobe_tui.aggregate.userspace import EventRole, StreamAggregator
from kprobe_tui.stream.filterexpr import compile_filter, parse
from tests.conftest import FIXTURES

COMMS = ["kpt-alpha", "kpt beta-2", "a [x] y", "<...>", "sshd", "0123456789abcde", "x"]


def line(comm: str, pid: int, micros: int, event: str, body: str, cpu: int = 1, tgid: int | None = None) -> str:
    """A trace_pipe line as the kernel prints it (trace_output.c: "%16s-%-7d", "(%7d)", "[%03d]", "%5lu.%06lu")."""
    task = f"{comm:>16}-{pid:<7d} " + (f"({tgid:>7d}) " if tgid is not None else "")
    return f"{task}[{cpu:03d}] ..... {micros // 1_000_000:5d}.{micros % 1_000_000:06d}: {event}: {body}"


def flood(count: int, seed: int = 3, tgid: bool = False) -> list[str]:
    rng = random.Random(seed)
    lines = []
    for i in range(count):
        comm = rng.choice(COMMS)
        pid = rng.choice([7, 1234, 99999, 4194304])
        value = rng.choice([-200, -1, 0, 1, 3, 100, 4095, 1 << 40])
        port = rng.choice([0x3500, 0x5000])
        event = rng.choice(["work", "nap"])
        body = f"(0x55663694b159) len={value} port={port} kptui_comm=\"{comm}\""
        lines.append(line(comm, pid, 289_108_444 + i, event, body, tgid=pid if tgid else None))
    return lines


def both_paths(aggregation: Aggregation, lines: list[str], roles: list[EventRole], arguments: dict, chunk: int = 97):
    results = []
    for fast in (True, False):
        aggregator = StreamAggregator(aggregation, roles, arguments, fast=fast)
        for start in range(0, len(lines), chunk):
            aggregator.feed(("\n".join(lines[start:start + chunk]) + "\n").encode())
        results.append((summarize(aggregation, aggregator.take(), "user", 0, 1), aggregator))
    (fast, fast_aggregator), (general, general_aggregator) = results
    assert fast_aggregator.general_blocks == 0 and general_aggregator.fast_blocks == 0
    return fast, general


ROLES = [EventRole("work", "work"), EventRole("nap", "nap")]
ARGUMENTS = {"len": "len", "port": "port", "comm": "kptui_comm"}


@pytest.mark.parametrize("aggregation", [
    Aggregation("count", keys=(Field("probe"),)),
    Aggregation("count", keys=(Field("comm"), Field("pid"))),
    Aggregation("count", keys=(Field("port", "ntohs"), Field("probe"))),
    Aggregation("hist", value=Field("len")),
    Aggregation("hist", keys=(Field("comm"),), value=Field("len"), buckets=Linear(-100, 200, 50)),
], ids=["probe", "comm-pid", "port-probe", "hist", "hist-by-comm-linear"])
@pytest.mark.parametrize("tgid", [False, True], ids=["plain", "record-tgid"])
def test_fast_path_equals_the_general_path(aggregation, tgid):
    fast, general = both_paths(aggregation, flood(3000, tgid=tgid), ROLES, ARGUMENTS)
    assert fast == general and fast.count == 3000
    assert fast.total == general.total


def test_header_comm_when_the_probe_did_not_capture_it():
    aggregation = Aggregation("count", keys=(Field("comm"),))
    lines = flood(500)
    fast, general = both_paths(aggregation, lines, ROLES, {"len": "len"})
    assert fast == general
    assert {entry.key[0] for entry in fast.entries} == set(COMMS)


def test_blocks_that_do_not_fit_take_the_general_path():
    aggregation = Aggregation("hist", value=Field("len"))
    lines = flood(200)
    lines.insert(50, "CPU:1 [LOST 2622 EVENTS]")
    lines[120] = lines[120].replace("len=", "len=(fault) x=")  # a fault: no number to read
    aggregator = StreamAggregator(aggregation, ROLES, ARGUMENTS)
    aggregator.feed(("\n".join(lines[:100]) + "\n").encode())
    aggregator.feed(("\n".join(lines[100:]) + "\n").encode())
    result = summarize(aggregation, aggregator.take(), "user", 0, 1)
    assert aggregator.general_blocks == 2 and result.count == 199  # the faulted hit has no value


def test_captured_lines_of_real_kernels():
    """Real kprobe lines from the 6.1 and 6.12 guests (record-tgid on) and uprobe lines from this machine."""
    for name, event in (("kprobe_6.1.txt", "open"), ("kprobe_6.12.txt", "open"), ("uprobe_plain.txt", "ev")):
        lines = [text for text in (FIXTURES / "trace_lines" / name).read_text().splitlines() if f": {event}: " in text]
        aggregation = Aggregation("count", keys=(Field("comm"), Field("pid")))
        fast, general = both_paths(aggregation, lines, [EventRole(event, event)], {}, chunk=len(lines))
        assert fast == general and fast.count == len(lines) > 0


def _latency(aggregation: Aggregation, events: list[tuple[int, int, str]], comm: str = "prog"):
    lines = [line(comm, pid, micros, name, "(0x55663694b159)" if name == "nap" else "(0x55663694b202 <- 0x55663694b159)")
             for pid, micros, name in events]
    return both_paths(aggregation, lines, [EventRole("nap", "nap", "entry"), EventRole("nap__return", "nap", "return")], {})


def test_latency_times_the_innermost_call_and_counts_the_outer_returns():
    events = [(5, 1_000, "nap"), (6, 1_005, "nap"), (5, 1_010, "nap"),  # 5 enters twice (nested)
              (5, 1_050, "nap__return"), (6, 1_070, "nap__return"), (5, 1_100, "nap__return"),  # outer: unmatched
              (7, 1_200, "nap__return")]  # entered before we started: unmatched
    fast, general = _latency(Aggregation("latency"), events)
    assert fast == general
    assert (fast.count, fast.total.min, fast.total.max, fast.unmatched) == (2, 40, 65, 2)


def test_latency_units_are_the_kernels():
    """us: difference of microsecond clocks; ms: difference of millisecond clock readings (as the kernel's
    common_timestamp/1000000 - $ts); ns: microseconds times 1000 (trace_pipe prints microseconds)."""
    events = [(5, 1_999_990, "nap"), (5, 2_000_010, "nap__return")]
    assert _latency(Aggregation("latency", unit="us"), events)[0].total.max == 20
    assert _latency(Aggregation("latency", unit="ms"), events)[0].total.max == 1
    assert _latency(Aggregation("latency", unit="ns"), events)[0].total.max == 20_000


def test_latency_by_comm_and_a_thread_crossing_blocks():
    aggregation = Aggregation("latency", keys=(Field("comm"),))
    events = [(9, 100 * i, "nap" if i % 2 == 0 else "nap__return") for i in range(400)]
    fast, general = _latency(aggregation, events, comm="my prog")
    assert fast == general and fast.entries[0].key == ("my prog",) and fast.count == 200
    assert fast.total.min == fast.total.max == 100


def test_a_view_filter_applies_where_the_kernel_could_not():
    aggregation = Aggregation("count", keys=(Field("comm"),))
    aggregator = StreamAggregator(aggregation, ROLES, ARGUMENTS)
    aggregator.set_view_filter("work", compile_filter(parse('ntohs(port) == 53 && len > 0')))
    lines = flood(1000)
    aggregator.feed(("\n".join(lines) + "\n").encode())
    result = summarize(aggregation, aggregator.take(), "user", 0, 1)
    expected = sum(1 for text in lines if (": nap: " in text) or (
        "port=13568" in text and int(text.split(" len=")[1].split()[0]) > 0))
    assert result.count == expected and aggregator.fast_blocks == 0


def test_latency_by_the_comm_the_return_captured():
    """By comm, the return captures $comm (the entry nothing): the comm at the return, as the kernel engine
    keys it, by either path."""
    aggregation = Aggregation("latency", keys=(Field("comm"),))
    lines = []
    for i in range(300):
        comm = COMMS[i % len(COMMS)]
        body = "(0x55663694b159)" if i % 2 == 0 else f'(0x55663694b202 <- 0x55663694b159) kptui_comm="{comm}"'
        lines.append(line("renamed", 9, 100 * i, "nap" if i % 2 == 0 else "nap__return", body))
    roles = [EventRole("nap", "nap", "entry"), EventRole("nap__return", "nap", "return")]
    fast, general = both_paths(aggregation, lines, roles, {"comm": "kptui_comm"})
    assert fast == general and fast.count == 150
    assert {entry.key[0] for entry in fast.entries} == {COMMS[i % len(COMMS)] for i in range(1, 300, 2)}


# Comms a thread may give itself (prctl PR_SET_NAME: any bytes but NUL, 15 of them; 16 fills "%16s"):
# spaces, dashes and digits that look like the header's "-PID", and the names our probes print.
HOSTILE_COMMS = ["a b", "-", "--1-2", "x-123", "1234567", "7-7 [001] .....", " lead", "trail ", "  ", "",
                 "0123456789abcde", "0123456789abcdef", "<...>", "len=5 ", "x len=7", "kptui_comm=\"q",
                 " kptui_comm=\"", "a kptui_comm=\"x", "sshd", "nginx: worker"]


def small_blocks(aggregation: Aggregation, lines: list[str], roles: list[EventRole], arguments: dict):
    """Both paths' results on blocks of 5 lines (most hold a hostile comm); the fast path read some."""
    results = []
    for fast in (True, False):
        aggregator = StreamAggregator(aggregation, roles, arguments, fast=fast)
        for start in range(0, len(lines), 5):
            aggregator.feed(("\n".join(lines[start:start + 5]) + "\n").encode())
        results.append(summarize(aggregation, aggregator.take(), "user", 0, 1))
        assert not fast or aggregator.fast_blocks > 0
    return results


def hostile_lines(count: int, seed: int, entry_return: bool = False) -> tuple[list[str], list[tuple[str, int]]]:
    """Lines whose captured comm (and string argument) is hostile, the header's the same or another (a renamed thread, a comm
    the kernel did not save), and (comm, value) for every line: what a right answer is made of."""
    rng = random.Random(seed)
    lines, truth = [], []
    for i in range(count):
        comm = rng.choice(HOSTILE_COMMS)
        shown = comm if rng.random() < 0.7 else rng.choice(HOSTILE_COMMS)
        pid = rng.choice([7, 1234, 99999]) if not entry_return else 4242
        value = rng.choice([-5, 0, 1, 3, 100, 70000])
        captured = f' kptui_comm="{comm}"'
        if entry_return:  # the return captures the comm, the entry nothing
            event = "nap" if i % 2 == 0 else "nap__return"
            body = "(0x55663694b159)" if i % 2 == 0 else "(0x55663694b202 <- 0x55663694b159)" + captured
            value = 10 * (i + 1)
        else:
            event, body = "work", f"(0x55663694b159) len={value} port=13568"
            if rng.random() < 0.2:  # a string argument (a filter's) before the comm: it may hold the comm's name
                body += f' path="{rng.choice(HOSTILE_COMMS)}"'
            body += captured
        lines.append(line(shown, pid, 1_000 + 10 * i * i, event, body))
        truth.append((comm, value))
    return lines, truth


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_hostile_comms_are_keyed_by_what_the_probe_captured(seed):
    """Every block (chunks of 5 lines: most hold a hostile comm) gives exactly the right answer by either
    path; the fast path takes what it can (a block it cannot read exactly goes down the general path)."""
    lines, truth = hostile_lines(2000, seed)
    hist = Aggregation("hist", keys=(Field("comm"),), value=Field("len"))
    count = Aggregation("count", keys=(Field("comm"), Field("pid")))
    expected_sums: dict = {}
    for comm, value in truth:
        hits, total = expected_sums.get((comm,), (0, 0))
        expected_sums[(comm,)] = (hits + 1, total + value)
    for aggregation in (hist, count):
        fast_result, general_result = small_blocks(aggregation, lines, [EventRole("work", "work")], ARGUMENTS)
        if aggregation is hist:
            assert {entry.key: (entry.stats.count, entry.stats.sum) for entry in fast_result.entries} == expected_sums
        else:
            assert sum(entry.stats.count for entry in fast_result.entries) == len(lines)
            assert {entry.key[0] for entry in fast_result.entries} == {comm for comm, _ in truth}


def test_a_comm_holding_the_arguments_name_where_another_line_has_it():
    """A comm read at the column where the first line's starts would be wrong when a shorter value moves
    the comm left and the comm holds a copy of the argument's name at that column: read as the regex
    reads it (or by the general path), the answer is the captured comm."""
    aggregation = Aggregation("count", keys=(Field("comm"),))
    arguments = {"len": "len", "comm": "kptui_comm"}
    wide = line("a", 7, 1_000, "work", '(0x55663694b159) len=-1234567890123 kptui_comm="a"')
    hostile_comm = '_kptui_comm="x'  # its copy of the name starts where the wide line's argument does
    narrow = line("b", 7, 1_001, "work", f'(0x55663694b159) len=5 kptui_comm="{hostile_comm}"')
    assert narrow.index('kptui_comm="', narrow.index(" len=")) + 13 == wide.index('kptui_comm="')
    assert narrow.rindex('kptui_comm="') == wide.index('kptui_comm="')
    for lines in ([wide, narrow], [narrow, wide], [wide, narrow, wide]):
        results = []
        for fast in (True, False):
            aggregator = StreamAggregator(aggregation, [EventRole("work", "work")], arguments, fast=fast)
            aggregator.feed(("\n".join(lines) + "\n").encode())
            results.append(summarize(aggregation, aggregator.take(), "user", 0, 1))
        assert {entry.key[0]: entry.count for entry in results[0].entries} == {
            "a": lines.count(wide), hostile_comm: 1}
        assert results[0] == results[1]


def test_hostile_comms_time_the_right_latency():
    """Latency by comm: the key is the comm the return captured, whatever its header shows."""
    lines, truth = hostile_lines(1000, 4, entry_return=True)
    aggregation = Aggregation("latency", keys=(Field("comm"),))
    roles = [EventRole("nap", "nap", "entry"), EventRole("nap__return", "nap", "return")]
    fast, general = small_blocks(aggregation, lines, roles, {"comm": "kptui_comm"})
    assert fast == general
    expected: dict = {}
    for i in range(1, len(lines), 2):
        latency = 10 * ((i * i) - (i - 1) * (i - 1))  # stamps 1000 + 10 i^2 us
        hits, total = expected.get((truth[i][0],), (0, 0))
        expected[(truth[i][0],)] = (hits + 1, total + latency)
    assert {entry.key: (entry.stats.count, entry.stats.sum) for entry in fast.entries} == expected
