"""A bounded event store: a ring of the newest events, and a filtered index over it.

Every event gets a sequence number (its position in the whole run). The ring keeps the last
``capacity`` of them; older ones are dropped and counted. The filtered view is a list of the
sequence numbers that match, trimmed from the front as the ring forgets them, so a filter
never copies events and row ``i`` of the view is found in O(1).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable, Iterable
from typing import cast

from kprobe_tui.stream.parser import Event

DEFAULT_CAPACITY = 1_000_000
# Python's cyclic collector runs a young collection every 700 new containers and, every ~100 of
# those, a full one that walks the whole heap: with a million-slot ring that walk costs ~0.1 s
# and took a third of ingest time. Events are tuples of plain values (no cycles), so collect
# young objects 50x less often: full collections become rare, memory is not held longer.
YOUNG_COLLECTION_THRESHOLD = 50_000


def _collect_less_often() -> None:
    threshold0, threshold1, threshold2 = gc.get_threshold()
    if threshold0 and threshold0 < YOUNG_COLLECTION_THRESHOLD:
        gc.set_threshold(YOUNG_COLLECTION_THRESHOLD, threshold1, threshold2)


class EventStore:
    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        if capacity >= 100_000:
            _collect_less_often()
        self._ring: list[Event | None] = [None] * capacity
        self.total = 0  # events ever appended; the next sequence number
        self._predicate: Callable[[Event], bool] | None = None
        self._matches: list[int] = []
        self._match_start = 0  # matches before this index have left the ring
        self.generation = 0  # bumped when the filter changes: views cache on (generation, total)
        self.lock = threading.Lock()  # the reader appends while the UI reads

    @property
    def dropped(self) -> int:
        """Events pushed out of the ring by newer ones."""
        return max(0, self.total - self.capacity)

    @property
    def oldest(self) -> int:
        """Sequence number of the oldest event still held."""
        return self.dropped

    def __len__(self) -> int:
        return self.total - self.dropped

    def get(self, seq: int) -> Event | None:
        if seq < self.oldest or seq >= self.total:
            return None
        return self._ring[seq % self.capacity]

    def extend(self, events: Iterable[Event]) -> None:
        with self.lock:
            ring, capacity, predicate, matches = self._ring, self.capacity, self._predicate, self._matches
            seq = self.total
            for event in events:
                ring[seq % capacity] = event
                if predicate is not None and predicate(event):
                    matches.append(seq)
                seq += 1
            self.total = seq
            if predicate is not None:
                self._trim()

    def _trim(self) -> None:
        oldest, matches = self.oldest, self._matches
        start = self._match_start
        while start < len(matches) and matches[start] < oldest:
            start += 1
        if start > 4096 and start * 2 > len(matches):
            del matches[:start]  # amortised: each index is deleted once
            start = 0
        self._match_start = start

    # --- the view: all held events, or the ones the filter matches ---------------------------

    @property
    def filtered(self) -> bool:
        return self._predicate is not None

    def matches(self, event: Event) -> bool:
        return self._predicate is None or self._predicate(event)

    def set_filter(self, predicate: Callable[[Event], bool] | None) -> None:
        """Apply a predicate to every held event and to each new one (None shows everything)."""
        with self.lock:
            self._predicate = predicate
            self.generation += 1
            self._match_start = 0
            if predicate is None:
                self._matches = []
                return
            ring, capacity = cast("list[Event]", self._ring), self.capacity  # slots oldest..total are filled
            self._matches = [seq for seq in range(self.oldest, self.total) if predicate(ring[seq % capacity])]

    def view_len(self) -> int:
        if self._predicate is None:
            return len(self)
        return len(self._matches) - self._match_start

    def view_seq(self, row: int) -> int:
        """Sequence number of row ``row`` of the view."""
        if self._predicate is None:
            return self.oldest + row
        return self._matches[self._match_start + row]

    def view_row(self, row: int) -> Event | None:
        with self.lock:
            if not 0 <= row < self.view_len():
                return None
            return self.get(self.view_seq(row))

    def view_rows(self, start: int, stop: int) -> list[Event]:
        """Rows ``start..stop`` of the view (what a table shows on screen)."""
        with self.lock:
            stop = min(stop, self.view_len())
            ring = cast("list[Event]", self._ring)  # the rows of the view are filled slots
            return [ring[self.view_seq(row) % self.capacity] for row in range(max(0, start), stop)]
