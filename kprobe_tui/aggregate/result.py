"""One immutable answer, whichever engine computed it: entries per key, buckets, count/min/max/avg.

``summarize`` is a pure function of the model and a ``Tally``; ``Result.to_json`` is the object
``--json`` prints (names in it are part of the interface: scripts read them).
"""

from __future__ import annotations

from dataclasses import dataclass

from kprobe_tui.aggregate.model import Aggregation
from kprobe_tui.aggregate.tally import Cell, Tally


@dataclass(frozen=True)
class Bucket:
    low: int | None  # None: open below (the negative or underflow bucket)
    high: int | None  # None: open above (the overflow bucket); the bucket is [low, high)
    count: int

    def to_json(self) -> dict:
        return {"low": self.low, "high": self.high, "count": self.count}


@dataclass(frozen=True)
class Stats:
    count: int
    sum: int | None = None
    min: int | None = None
    max: int | None = None

    @property
    def avg(self) -> float | None:
        return self.sum / self.count if self.sum is not None and self.count else None

    def to_json(self, with_value: bool) -> dict:
        record: dict[str, int | float | None] = {"count": self.count}
        if with_value:
            record.update({"sum": self.sum, "min": self.min, "max": self.max, "avg": self.avg})
        return record


@dataclass(frozen=True)
class Entry:
    key: tuple  # values in the order of ``Result.key_names``
    stats: Stats
    buckets: tuple[Bucket, ...] | None = None

    @property
    def count(self) -> int:
        return self.stats.count


@dataclass(frozen=True)
class Result:
    kind: str  # count, hist, latency
    engine: str  # kernel, user
    start: float  # wall-clock seconds: the stretch of time this result covers
    end: float
    key_names: tuple[str, ...]
    value_name: str | None  # the histogram's field, or usecs/nsecs/msecs
    entries: tuple[Entry, ...]  # most hits first (the top N when asked)
    total: Stats  # over every key
    buckets: tuple[Bucket, ...] | None  # over every key (hist, latency)
    unit: str | None = None  # latency
    others: int = 0  # hits of the keys left out by --top
    dropped: int = 0
    lost: int = 0
    unmatched: int = 0

    @property
    def count(self) -> int:
        return self.total.count

    @property
    def seconds(self) -> float:
        return max(0.0, self.end - self.start)

    def to_json(self) -> dict:
        with_value = self.kind != "count"
        record: dict = {"kind": self.kind, "engine": self.engine, "start": round(self.start, 6),
                        "end": round(self.end, 6)}
        if self.unit:
            record["unit"] = self.unit
        if self.value_name:
            record["value"] = self.value_name
        record.update(self.total.to_json(with_value))
        if self.buckets is not None:
            record["buckets"] = [bucket.to_json() for bucket in self.buckets]
        if self.key_names or self.kind == "count":
            entries = []
            for entry in self.entries:
                item = {"key": dict(zip(self.key_names, entry.key)), **entry.stats.to_json(with_value)}
                if entry.buckets is not None:
                    item["buckets"] = [bucket.to_json() for bucket in entry.buckets]
                entries.append(item)
            record["entries"] = entries
            if self.others:
                record["others"] = self.others
        for name in ("dropped", "lost", "unmatched"):
            if getattr(self, name):
                record[name] = getattr(self, name)
        return record


def _stats(cell: Cell, with_value: bool) -> Stats:
    if not with_value:
        return Stats(cell.count)
    return Stats(cell.count, cell.total, cell.low, cell.high)


def _bucket_counts(aggregation: Aggregation, cells: list[Cell]) -> dict[int, int]:
    counts: dict[int, int] = {}
    index = aggregation.bucket_scheme.index
    for cell in cells:
        for value, hits in (cell.values or {}).items():
            at = index(value)
            counts[at] = counts.get(at, 0) + hits
        for at, hits in (cell.grouped or {}).items():
            counts[at] = counts.get(at, 0) + hits
    return counts


def _buckets(aggregation: Aggregation, cells: list[Cell]) -> tuple[Bucket, ...]:
    """Every bucket from the lowest to the highest one hit, the empty ones between included."""
    counts = {at: hits for at, hits in _bucket_counts(aggregation, cells).items() if hits}
    if not counts:
        return ()
    scheme = aggregation.bucket_scheme
    return tuple(Bucket(*scheme.bounds(at), counts.get(at, 0)) for at in scheme.indices(min(counts), max(counts)))


def _merged(cells: list[Cell]) -> Cell:
    whole = Cell()
    for cell in cells:
        whole.merge(cell)
    return whole


def summarize(aggregation: Aggregation, tally: Tally, engine: str, start: float, end: float) -> Result:
    """The answer for ``tally``: keys shown as the user reads them, most hits first, top N kept."""
    with_value = aggregation.has_value
    grouped: dict[tuple, list[Cell]] = {}
    for key, cell in tally.cells.items():
        if cell.count:
            shown = tuple(field.shown(value) for field, value in zip(aggregation.keys, key))
            grouped.setdefault(shown, []).append(cell)
    entries = []
    for key, cells in grouped.items():
        whole = _merged(cells)
        buckets = _buckets(aggregation, cells) if with_value and aggregation.keys else None
        entries.append(Entry(key, _stats(whole, with_value), buckets))
    entries.sort(key=lambda entry: (-entry.count, tuple(str(part) for part in entry.key)))
    others = 0
    if aggregation.top is not None and len(entries) > aggregation.top:
        others = sum(entry.count for entry in entries[aggregation.top:])
        entries = entries[: aggregation.top]
    cells = [cell for cells in grouped.values() for cell in cells]
    return Result(
        kind=aggregation.kind, engine=engine, start=start, end=end,
        key_names=tuple(field.label for field in aggregation.keys), value_name=aggregation.value_label,
        entries=tuple(entries), total=_stats(_merged(cells), with_value),
        buckets=_buckets(aggregation, cells) if with_value else None,
        unit=aggregation.unit if aggregation.kind == "latency" else None,
        others=others, dropped=tally.dropped, lost=tally.lost, unmatched=tally.unmatched,
    )
