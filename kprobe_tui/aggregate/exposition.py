"""Aggregations as Prometheus metrics: a collector that, at each scrape, turns each run's cumulative
``Result`` into a counter (count) or a histogram (hist, latency), with the exporter's health beside.

Pure: it is given a callable per metric that returns the Result since the start (or None when the
run cannot say), so it is tested on hand-built Results with no kernel and no server.

Buckets are mapped exactly. Our buckets are [low, high) of integers; Prometheus' ``le`` bucket counts
the values <= le, so a bucket's ``le`` is high - 1: log2's [0], [1], [2, 4), [4, 8) are le 0, 1, 3,
7; a linear underflow (..., MIN) is le MIN-1; the open top bucket is only in +Inf. A latency is
exposed in seconds (Prometheus' base unit; promtool's lint refuses others): its ``unit`` is only the
resolution of its buckets, le (2^i - 1) us is (2^i - 1) / 10^6 s (one division: the nearest float). Every series of
a metric has the same ``le`` set: all of a linear histogram's, and log2's from 0 (-1 once a negative
was seen) to the highest bucket hit so far by any key, which only grows, so no series ever vanishes.

Labels come from traced processes (a comm is whatever the process calls itself): prometheus_client
escapes them in the page; a lone surrogate (an undecodable byte) is written as its escape, since it
cannot be encoded; keys whose labels come out the same are summed, so no series is ever duplicated.
At most ``max_series`` series per metric are shown, those with the most hits; the others are summed
into one series whose every label is ``other``, and kprobe_tui_export_folded_series says how many.
A histogram with a negative bucket has no _sum and _count (prometheus_client leaves them out, as
OpenMetrics says: such a sum is no counter); its +Inf bucket is the count.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from kprobe_tui.aggregate.model import Linear, Log2
from kprobe_tui.aggregate.result import Bucket, Result

OTHER = "other"


@dataclass(frozen=True)
class ExportedMetric:
    name: str
    help: str
    kind: str  # count, hist, latency
    labels: tuple[str, ...]  # one per key of the Result, in its order
    max_series: int
    probes: int  # how many probes the run has in the kernel
    sample: Callable[[], Result | None]  # the Result since the start; None: the run cannot say now
    buckets: Log2 | Linear | None = None  # hist and latency
    divisor: int = 1  # exposed = value / divisor: a latency's units per second (Prometheus' base unit)


@dataclass
class _Series:
    """One labelled series being built: hits, the sum of the values, and hits per inclusive upper bound."""

    count: int = 0
    total: int = 0
    hits: Counter = field(default_factory=Counter)  # le -> hits; None: above every finite le

    def add(self, count: int, total: int | None, buckets: Sequence[Bucket]) -> None:
        self.count += count
        self.total += total or 0
        for bucket in buckets:
            self.hits[None if bucket.high is None else bucket.high - 1] += bucket.count

    def merge(self, other: _Series) -> None:
        self.count += other.count
        self.total += other.total
        self.hits.update(other.hits)


def label_value(value: object) -> str:
    """A key as a label: its text, with what UTF-8 cannot encode (lone surrogates) as backslash escapes."""
    return str(value).encode("utf-8", "backslashreplace").decode("utf-8")


def upper_bounds(scheme: Log2 | Linear, hit: Sequence[Bucket]) -> list[int]:
    """The finite ``le`` values of a metric whose buckets ``hit`` (over every key) have hits."""
    if isinstance(scheme, Linear):
        indices = range(-1, scheme.count)
    else:
        reached = [scheme.index(bucket.high - 1) for bucket in hit if bucket.high is not None]
        if not reached:
            return []
        indices = range(min(0, *reached), max(reached) + 1)
    return [high - 1 for high in (scheme.bounds(index)[1] for index in indices) if high is not None]


def fold(metric: ExportedMetric, result: Result) -> tuple[dict[tuple[str, ...], _Series], int]:
    """The series to expose (at most max_series, plus "other") and how many keys were folded into "other"."""
    series: dict[tuple[str, ...], _Series] = {}
    for entry in result.entries:
        labels = tuple(label_value(part) for part in entry.key)
        buckets = entry.buckets if entry.buckets is not None else result.buckets or ()
        series.setdefault(labels, _Series()).add(entry.count, entry.stats.sum, buckets)
    if not series and not metric.labels:
        series[()] = _Series()  # a metric without labels is there from the start, at 0
    if len(series) <= metric.max_series:
        return series, 0
    ranked = sorted(series.items(), key=lambda item: (-item[1].count, item[0]))
    other_labels = (OTHER,) * len(metric.labels)
    kept = {labels: one for labels, one in ranked[: metric.max_series] if labels != other_labels}
    folded = [one for labels, one in ranked if labels not in kept]
    other = _Series()
    for one in folded:
        other.merge(one)
    kept[other_labels] = other
    return kept, len(folded) - (other_labels in series)


def family(metric: ExportedMetric, result: Result, series: dict[tuple[str, ...], _Series]) -> Metric:
    if metric.kind == "count":
        counter = CounterMetricFamily(metric.name, metric.help, labels=metric.labels)
        for labels, one in series.items():
            counter.add_metric(labels, one.count)
        return counter
    histogram = HistogramMetricFamily(metric.name, metric.help, labels=metric.labels)
    assert metric.buckets is not None, "a hist or latency metric has its bucket scheme"
    bounds = upper_bounds(metric.buckets, result.buckets or ())
    for labels, one in series.items():
        cumulative, below = [], 0
        for le in bounds:
            below += one.hits.get(le, 0)
            cumulative.append((floatToGoString(le / metric.divisor), below))
        cumulative.append(("+Inf", one.count))
        histogram.add_metric(labels, cumulative, one.total / metric.divisor)
    return histogram


class ExportCollector(Collector):
    """Each metric's cumulative answer at scrape time, and the exporter's health."""

    def __init__(self, metrics: Sequence[ExportedMetric]) -> None:
        self.metrics = list(metrics)

    def collect(self) -> Iterator[Metric]:
        started = time.monotonic()
        up = GaugeMetricFamily("kprobe_tui_export_up", "1 when the metric's run answered this scrape, 0 when not",
                               labels=["metric"])
        probes = GaugeMetricFamily("kprobe_tui_export_probes", "probes the metric's run has in the kernel",
                                   labels=["metric"])
        folded = GaugeMetricFamily("kprobe_tui_export_folded_series",
                                   "keys summed into the metric's \"other\" series (beyond its max_series)",
                                   labels=["metric"])
        lost = CounterMetricFamily("kprobe_tui_export_lost_events", "hits not counted since the start: events "
                                   "the ring buffer lost, kprobe misses, a full kernel table", labels=["metric"])
        for metric in self.metrics:
            result = metric.sample()
            up.add_metric([metric.name], 0 if result is None else 1)
            probes.add_metric([metric.name], metric.probes)
            if result is None:
                continue
            series, folded_keys = fold(metric, result)
            yield family(metric, result, series)
            folded.add_metric([metric.name], folded_keys)
            lost.add_metric([metric.name], result.lost + result.dropped)
        yield from (up, probes, folded, lost)
        yield GaugeMetricFamily("kprobe_tui_export_scrape_duration_seconds",
                                "seconds this scrape took to sample every run", value=time.monotonic() - started)
