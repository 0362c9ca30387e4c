"""What an engine counted over one stretch of time, before it is summarised into a ``Result``.

A ``Tally`` maps a key (a tuple of display-ready values: comm, pid, probe, raw argument values)
to a ``Cell``. A cell keeps the hit count and, for a value, either the exact distribution
(value -> hits: the user-space engine, and kernel tables keyed by the value) or hits per bucket
(kernel latency, grouped by ``.log2`` in the kernel) with the sum, minimum and maximum beside it.
Tallies of consecutive intervals merge into the cumulative one.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class Cell:
    count: int = 0
    total: int = 0  # sum of the values
    low: int | None = None  # minimum value
    high: int | None = None  # maximum value
    values: Counter | None = None  # exact value -> hits
    grouped: Counter | None = None  # bucket index -> hits, when the kernel grouped the values

    def add_values(self, values: Counter) -> None:
        """Exact values with their hit counts."""
        if not values:
            return
        if self.values is None:
            self.values = Counter()
        self.values.update(values)
        self.count += sum(values.values())
        self.total += sum(value * hits for value, hits in values.items())
        self._extend(min(values), max(values))

    def add_grouped(self, index: int, hits: int, total: int) -> None:
        """Hits in one bucket and the sum of their values (what a ``.log2`` kernel table gives)."""
        if self.grouped is None:
            self.grouped = Counter()
        self.grouped[index] += hits
        self.count += hits
        self.total += total

    def extend(self, low: int | None, high: int | None) -> None:
        """Widen the value range (a kernel min/max tracker's reading)."""
        self._extend(low, high)

    def _extend(self, low: int | None, high: int | None) -> None:
        if low is not None:
            self.low = low if self.low is None else min(self.low, low)
        if high is not None:
            self.high = high if self.high is None else max(self.high, high)

    def merge(self, other: Cell) -> None:
        self.count += other.count
        self.total += other.total
        self._extend(other.low, other.high)
        if other.values is not None:
            self.values = (self.values or Counter()) + other.values
        if other.grouped is not None:
            self.grouped = (self.grouped or Counter()) + other.grouped


@dataclass
class Tally:
    cells: dict[tuple, Cell] = field(default_factory=dict)
    dropped: int = 0  # hits a full kernel table could not keep
    lost: int = 0  # events the ring buffer lost before we read them (user-space engine)
    unmatched: int = 0  # latency: returns with no timed entry on their thread

    def cell(self, key: tuple) -> Cell:
        found = self.cells.get(key)
        if found is None:
            found = self.cells[key] = Cell()
        return found

    def count(self, key: tuple, hits: int) -> None:
        self.cell(key).count += hits

    @property
    def hits(self) -> int:
        return sum(cell.count for cell in self.cells.values())

    def merge(self, other: Tally) -> None:
        for key, cell in other.cells.items():
            self.cell(key).merge(cell)
        self.dropped += other.dropped
        self.lost += other.lost
        self.unmatched += other.unmatched

    def copy(self) -> Tally:
        fresh = Tally()
        fresh.merge(self)
        return fresh
