"""An aggregation ``Result`` as a picture sized to the widget: bpftrace's bucket rows with ``@`` bars,
or the keys with the most hits first (top N: as many as fit), and what did not fit said in one line.

Keys are the traced system's text (a comm, a captured string): shown through ``plain``, never markup.
"""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

from kprobe_tui.aggregate.result import Bucket, Entry, Result
from kprobe_tui.aggregate.text import bar, bucket_label
from kprobe_tui.textsafe import printable

MIN_BAR = 10  # narrower than this a bar shows no shape: the labels are cut instead


def _key_text(key: tuple) -> str:
    return ", ".join(printable(part) if isinstance(part, str) else str(part) for part in key)


def _rows(labels: list[str], counts: list[int], width: int) -> list[Text]:
    """``label  count |bar|`` rows filling ``width``; a label too long for the bar is cut."""
    if not labels:
        return [Text("(no hits yet)", style="dim")]
    count_width = max(5, *(len(f"{count:,}") for count in counts))
    label_width = min(max(len(label) for label in labels), max(4, width - count_width - MIN_BAR - 4))
    bar_width = max(MIN_BAR, width - label_width - count_width - 4)
    most = max(counts)
    rows = []
    for label, count in zip(labels, counts):
        shown = label if len(label) <= label_width else label[: label_width - 1] + "…"
        row = Text(f"{shown:<{label_width}} {count:>{count_width},} ")
        row.append(bar(count, most, bar_width), style="bold" if count == most and count else "")
        rows.append(row)
    return rows


def bucket_rows(buckets: tuple[Bucket, ...], linear: bool, width: int) -> list[Text]:
    return _rows([bucket_label(bucket, linear) for bucket in buckets], [bucket.count for bucket in buckets], width)


def count_rows(result: Result, width: int, height: int) -> list[Text]:
    """Keys with the most hits first: a header, then as many as fit, then how many more."""
    if not result.key_names:
        return [Text(f"hits {result.count:,}", style="bold")]
    entries = list(result.entries)
    room = max(1, height - 1)
    shown = entries if len(entries) <= room else entries[: room - 1]
    body = _rows([_key_text(entry.key) for entry in shown], [entry.count for entry in shown], width)
    names = ", ".join(name.upper() for name in result.key_names)
    counted = body[0].plain.find("|") if shown else len(names) + 1  # COUNT ends where the bars start
    header = Text(f"{names} {'COUNT':>{max(5, counted - len(names) - 2)}}", style="bold")
    rows = [header, *body]
    left = entries[len(shown):]
    more = sum(entry.count for entry in left) + result.others
    if left or result.others:
        rows.append(Text(f"… {len(left):,} more keys, {more:,} hits", style="dim"))
    return rows


def distribution_rows(result: Result, linear: bool, width: int, height: int) -> list[Text]:
    """One histogram, or one per key (most hits first) while they fit."""
    if not result.key_names:
        return bucket_rows(result.buckets or (), linear, width)
    rows: list[Text] = []
    entries: list[Entry] = list(result.entries)
    for at, entry in enumerate(entries):
        block = [Text(f"@{result.value_name}[{_key_text(entry.key)}]  count {entry.count:,}", style="bold"),
                 *bucket_rows(entry.buckets or (), linear, width)]
        if rows and len(rows) + len(block) + 1 > height:
            left = entries[at:]
            rows.append(Text(f"… {len(left):,} more keys, {sum(e.count for e in left):,} hits", style="dim"))
            break
        rows += block
    return rows or [Text("(no hits yet)", style="dim")]


def result_rows(result: Result | None, linear: bool, width: int, height: int) -> list[Text]:
    if result is None:
        return []
    if result.kind == "count":
        return count_rows(result, width, height)
    return distribution_rows(result, linear, width, height)


class StatsTable(Widget):
    """The current result, redrawn to the widget's size (the bars take the width that is left)."""


    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.result: Result | None = None
        self.linear = False

    def show(self, result: Result | None, linear: bool) -> None:
        self.result, self.linear = result, linear
        self.refresh()

    def lines(self) -> list[Text]:
        """What is drawn now (the tests read it)."""
        width, height = self.content_region.width, self.content_region.height
        return result_rows(self.result, self.linear, max(width, 20), max(height, 1))[: max(height, 1)]

    def render(self) -> Text:
        return Text("\n").join(self.lines())
