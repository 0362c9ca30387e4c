"""The export collector on Results made as the engines make them (a Tally, summarized): the page parsed back
with prometheus_client's parser, and checked by Debian's promtool where it is installed. Every page is
made in OpenMetrics too (what Prometheus asks for first) and must parse to the same samples."""

from __future__ import annotations

import shlex
import shutil
import subprocess

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics import exposition as openmetrics
from prometheus_client.openmetrics import parser as openmetrics_parser
from prometheus_client.parser import text_string_to_metric_families

from kprobe_tui.aggregate import exportconfig
from kprobe_tui.aggregate.exposition import OTHER, ExportCollector, ExportedMetric
from kprobe_tui.aggregate.model import Aggregation, Field, Linear
from kprobe_tui.aggregate.result import Result, summarize
from kprobe_tui.aggregate.tally import Tally
from kprobe_tui.cli import build_parser
from kprobe_tui.commands.export import own_path_warning, parse_listen
from kprobe_tui.probes.spec import parse_spec


def result(aggregation: Aggregation, cells: dict[tuple, list[int] | int], lost: int = 0) -> Result:
    """A cumulative Result: per key, a hit count (count) or the values seen (hist, latency)."""
    tally = Tally(lost=lost)
    for key, seen in cells.items():
        if isinstance(seen, int):
            tally.count(key, seen)
        else:
            tally.cell(key).add_values({value: seen.count(value) for value in set(seen)})
    return summarize(aggregation, tally, "user", 0.0, 1.0)


def page(aggregation: Aggregation, answer: Result | None, name: str = "m", max_series: int = 100,
         divisor: int = 1) -> str:
    metric = ExportedMetric(name, "help text", aggregation.kind, tuple(key.name for key in aggregation.keys),
                            max_series, 1, lambda: answer, aggregation.buckets, divisor)
    registry = CollectorRegistry()
    registry.register(ExportCollector([metric]))
    text = generate_latest(registry).decode("utf-8")
    assert_same_in_openmetrics(text, openmetrics.generate_latest(registry).decode("utf-8"))
    return text


def every_sample(families) -> dict[tuple, float]:
    """Sample name and labels (sorted pairs) -> value, of every family but the scrape's own duration."""
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value for family in families
            if family.name != "kprobe_tui_export_scrape_duration_seconds" for sample in family.samples}


def assert_same_in_openmetrics(text: str, page_in_openmetrics: str) -> None:
    """The OpenMetrics page passes its strict parser (escapes, cumulative buckets, # EOF) with the text page's samples."""
    families = list(openmetrics_parser.text_string_to_metric_families(page_in_openmetrics))
    assert every_sample(families) == every_sample(text_string_to_metric_families(text))


def samples(text: str, name: str) -> dict[tuple, float]:
    """Sample name and labels (sorted pairs) -> value, of the family ``name``."""
    [family] = [family for family in text_string_to_metric_families(text) if family.name == name]
    return every_sample([family])


def promtool_check(text: str) -> None:
    """``promtool check metrics``: the page is valid, and passes its lint (exit 0, nothing said)."""
    if shutil.which("promtool") is None:
        pytest.skip("promtool is not installed (Debian: prometheus)")
    checked = subprocess.run(["promtool", "check", "metrics"], input=text.encode("utf-8"), capture_output=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_counts_per_comm_are_a_counter():
    aggregation = Aggregation("count", keys=(Field("comm"), Field("pid")))
    text = page(aggregation, result(aggregation, {("kpt-alpha", 10): 50, ("kpt beta-2", 11): 7}), "work_calls")
    assert samples(text, "work_calls") == {
        ("work_calls_total", (("comm", "kpt-alpha"), ("pid", "10"))): 50.0,
        ("work_calls_total", (("comm", "kpt beta-2"), ("pid", "11"))): 7.0,
    }
    assert samples(text, "kprobe_tui_export_up") == {("kprobe_tui_export_up", (("metric", "work_calls"),)): 1.0}
    promtool_check(text)


@pytest.mark.parametrize("kind, prometheus_type", [("count", "counter"), ("hist", "histogram"), ("latency", "histogram")])
def test_help_and_type_come_from_the_config(kind, prometheus_type):
    aggregation = Aggregation(kind, value=Field("len") if kind == "hist" else None)
    text = page(aggregation, result(aggregation, {(): [1, 2]} if kind != "count" else {(): 2}))
    [family] = [family for family in text_string_to_metric_families(text) if family.name == "m"]
    assert (family.documentation, family.type) == ("help text", prometheus_type)


def test_a_count_without_labels_is_there_at_zero_before_any_hit():
    aggregation = Aggregation("count")
    assert samples(page(aggregation, result(aggregation, {})), "m") == {("m_total", ()): 0.0}


def test_log2_buckets_map_exactly_to_cumulative_le_shared_by_every_series():
    """[0], [1], [2, 4), [4, 8): le 0, 1, 3, 7 (integers: a bucket [low, high) is the values <= high - 1)."""
    aggregation = Aggregation("hist", keys=(Field("comm"),), value=Field("len"))
    text = page(aggregation, result(aggregation, {("a",): [0, 1, 2, 3, 3, 7], ("b",): [1]}))
    got = samples(text, "m")
    assert {le: got[("m_bucket", (("comm", "a"), ("le", le)))] for le in ("0.0", "1.0", "3.0", "7.0", "+Inf")} == {
        "0.0": 1.0, "1.0": 2.0, "3.0": 5.0, "7.0": 6.0, "+Inf": 6.0}
    # b's highest bucket is [1]; it has a's le too, so sum by (le) adds them
    assert {le: got[("m_bucket", (("comm", "b"), ("le", le)))] for le in ("0.0", "1.0", "3.0", "7.0", "+Inf")} == {
        "0.0": 0.0, "1.0": 1.0, "3.0": 1.0, "7.0": 1.0, "+Inf": 1.0}
    assert got[("m_sum", (("comm", "a"),))] == 16.0 and got[("m_count", (("comm", "a"),))] == 6.0
    promtool_check(text)


def test_a_negative_value_adds_le_minus_one_and_drops_sum_and_count():
    aggregation = Aggregation("hist", value=Field("len"))
    got = samples(page(aggregation, result(aggregation, {(): [-5, 0, 2]})), "m")
    assert got == {("m_bucket", (("le", "-1.0"),)): 1.0, ("m_bucket", (("le", "0.0"),)): 2.0,
                   ("m_bucket", (("le", "1.0"),)): 2.0, ("m_bucket", (("le", "3.0"),)): 3.0,
                   ("m_bucket", (("le", "+Inf"),)): 3.0}


def test_linear_buckets_every_one_with_underflow_and_overflow_only_in_inf():
    aggregation = Aggregation("hist", value=Field("len"), buckets=Linear(0, 300, 100))
    text = page(aggregation, result(aggregation, {(): [-1, 0, 99, 100, 300, 1000]}))
    assert samples(text, "m") == {
        ("m_bucket", (("le", "-1.0"),)): 1.0, ("m_bucket", (("le", "99.0"),)): 3.0,
        ("m_bucket", (("le", "199.0"),)): 4.0, ("m_bucket", (("le", "299.0"),)): 4.0,
        ("m_bucket", (("le", "+Inf"),)): 6.0}
    promtool_check(text)


def test_latency_is_in_seconds():
    aggregation = Aggregation("latency", unit="us")
    text = page(aggregation, result(aggregation, {(): [1500, 3000]}), "nap_seconds", divisor=1_000_000)
    got = samples(text, "nap_seconds")
    assert got[("nap_seconds_bucket", (("le", "0.001023"),))] == 0.0
    assert got[("nap_seconds_bucket", (("le", "0.002047"),))] == 1.0
    assert got[("nap_seconds_bucket", (("le", "0.004095"),))] == 2.0
    assert got[("nap_seconds_sum", ())] == 0.0045
    promtool_check(text)


HOSTILE = ['say "hi"', "new\nline", "back\\slash", "\\n", "cr\rtab\t", "nul\x00esc\x1b[2J", "\u202eevil", "\udc80"]


def test_hostile_comms_are_escaped_and_read_back_exactly():
    aggregation = Aggregation("count", keys=(Field("comm"),))
    text = page(aggregation, result(aggregation, {(comm,): n for n, comm in enumerate(HOSTILE, 1)}))
    got = samples(text, "m")
    assert len(got) == len(HOSTILE)
    assert got[("m_total", (("comm", "new\nline"),))] == 2.0
    assert got[("m_total", (("comm", "\\n"),))] == 4.0  # not the same series as a newline
    assert got[("m_total", (("comm", "\\udc80"),))] == 8.0  # an undecodable byte: its escape
    promtool_check(text)


def test_keys_whose_labels_come_out_the_same_are_one_series():
    """A lone surrogate is written as its escape: a comm spelling that escape is the same label."""
    aggregation = Aggregation("count", keys=(Field("comm"),))
    text = page(aggregation, result(aggregation, {("\udc80",): 2, ("\\udc80",): 3}))
    assert samples(text, "m") == {("m_total", (("comm", "\\udc80"),)): 5.0}


def test_ten_thousand_comms_are_capped_and_the_rest_folded_into_other():
    aggregation = Aggregation("hist", keys=(Field("comm"), Field("pid")), value=Field("len"))
    cells: dict[tuple, list[int] | int] = {(f'p"\\\n{n}', n): [n % 50] * (1 + n % 7) for n in range(10_000)}
    answer = result(aggregation, cells)
    text = page(aggregation, answer, max_series=100)
    got = samples(text, "m")
    counts = {labels: value for (name, labels), value in got.items() if name == "m_count"}
    assert len(counts) == 101
    other = counts.pop((("comm", OTHER), ("pid", OTHER)))
    assert min(counts.values()) == 7.0  # the top 100 by hits: every kept key was hit 7 times
    assert other + sum(counts.values()) == answer.count
    assert samples(text, "kprobe_tui_export_folded_series") == {
        ("kprobe_tui_export_folded_series", (("metric", "m"),)): 9_900.0}
    promtool_check(text)


def test_a_comm_named_other_never_duplicates_the_folded_series():
    aggregation = Aggregation("count", keys=(Field("comm"),))
    text = page(aggregation, result(aggregation, {(OTHER,): 100, ("a",): 50, ("b",): 1, ("c",): 1}), max_series=2)
    assert samples(text, "m") == {("m_total", (("comm", "a"),)): 50.0, ("m_total", (("comm", OTHER),)): 102.0}
    promtool_check(text)


def test_a_run_that_cannot_answer_is_down_and_its_metric_left_out():
    aggregation = Aggregation("count", keys=(Field("comm"),))
    text = page(aggregation, None)
    assert samples(text, "kprobe_tui_export_up") == {("kprobe_tui_export_up", (("metric", "m"),)): 0.0}
    assert all(family.name != "m" for family in text_string_to_metric_families(text))


def test_lost_events_are_counted():
    aggregation = Aggregation("count", keys=(Field("comm"),))
    text = page(aggregation, result(aggregation, {("a",): 1}, lost=12))
    assert samples(text, "kprobe_tui_export_lost_events") == {
        ("kprobe_tui_export_lost_events_total", (("metric", "m"),)): 12.0}


def test_a_metric_on_the_exporters_own_tcp_path_is_warned_of_and_a_uprobe_of_the_same_name_is_not():
    """The golden rule, decided on the specs as the CONFIG gives them (compiling needs kprobes, not here)."""
    config = exportconfig.parse("""
[[metric]]
name = "sends"
kind = "count"
probe = ["tcp_sendmsg size", "do_nanosleep"]
by = ["comm"]

[[metric]]
name = "lab_sends"
kind = "count"
binary = "/bin/true"
probe = "tcp_sendmsg"
""", "export.toml")
    sends, lab_sends = ([parse_spec(shlex.split(spec), binary=metric.binary) for spec in metric.specs]
                        for metric in config.metrics)
    warning = own_path_warning("sends", sends)
    assert warning is not None and warning.startswith("sends: tcp_sendmsg is on the exporter's own path")
    assert "do_nanosleep" not in warning
    assert own_path_warning("lab_sends", lab_sends) is None
    # the terminal's half of the guard's path is not the server's (it sends with send, not write)
    assert own_path_warning("reads", [parse_spec(["vfs_read"]), parse_spec(["tty_write"])]) is None


def test_the_exporter_listens_on_loopback_unless_told_otherwise():
    assert parse_listen(build_parser().parse_args(["export", "export.toml"]).listen) == ("127.0.0.1", 9435)
    assert parse_listen("[::]:9435") == ("::", 9435)
