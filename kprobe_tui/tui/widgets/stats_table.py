"""An aggregation ``Result`` as a picture sized to the widget: bpftrace's bucket rows with ``@`` bars,
or the keys with the most hits first (top N: as many as fit), and what did not fit said in one line.
The keys scroll (up/down, page up/down, the wheel): the ones above the first shown are said in a line too.

Keys are the traced system's text (a comm, a captured string): shown through ``plain``, never markup.
"""

from __future__ import annotations

from rich.text import Text
from textual.binding import Binding
from textual.reactive import var
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


def _above(entries: tuple[Entry, ...], skip: int) -> list[Text]:
    """The line for the keys scrolled past, if any."""
    if not skip:
        return []
    return [Text(f"… {skip:,} keys above (up), {sum(entry.count for entry in entries[:skip]):,} hits", style="dim")]


def _below(left: list[Entry], more: int) -> Text:
    return Text(f"… {len(left):,} more keys, {more:,} hits" + (" (down)" if left else ""), style="dim")


def count_rows(result: Result, width: int, height: int, skip: int = 0) -> list[Text]:
    """Keys with the most hits first: a header, then as many as fit from the ``skip``-th, then how many more."""
    if not result.key_names:
        return [Text(f"hits {result.count:,}", style="bold")]
    above = _above(result.entries, skip)
    entries = list(result.entries[skip:])
    room = max(1, height - 1 - len(above))
    shown = entries if len(entries) <= room else entries[: room - 1]
    body = _rows([_key_text(entry.key) for entry in shown], [entry.count for entry in shown], width)
    names = ", ".join(name.upper() for name in result.key_names)
    counted = body[0].plain.find("|") if shown else len(names) + 1  # COUNT ends where the bars start
    header = Text(f"{names} {'COUNT':>{max(5, counted - len(names) - 2)}}", style="bold")
    rows = [header, *above, *body]
    left = entries[len(shown):]
    more = sum(entry.count for entry in left) + result.others
    if left or result.others:
        rows.append(_below(left, more))
    return rows


def distribution_rows(result: Result, linear: bool, width: int, height: int, skip: int = 0) -> list[Text]:
    """One histogram, or one per key (most hits first, from the ``skip``-th) while they fit."""
    if not result.key_names:
        return bucket_rows(result.buckets or (), linear, width)
    rows: list[Text] = _above(result.entries, skip)
    entries: list[Entry] = list(result.entries[skip:])
    for at, entry in enumerate(entries):
        block = [Text(f"@{result.value_name}[{_key_text(entry.key)}]  count {entry.count:,}", style="bold"),
                 *bucket_rows(entry.buckets or (), linear, width)]
        if at and len(rows) + len(block) + 1 > height:
            left = entries[at:]
            rows.append(_below(left, sum(e.count for e in left)))
            break
        rows += block
    return rows or [Text("(no hits yet)", style="dim")]


def result_rows(result: Result | None, linear: bool, width: int, height: int, skip: int = 0) -> list[Text]:
    if result is None:
        return []
    if result.kind == "count":
        return count_rows(result, width, height, skip)
    return distribution_rows(result, linear, width, height, skip)


class StatsTable(Widget, can_focus=True):
    """The current result, redrawn to the widget's size (the bars take the width that is left)."""

    BINDINGS = [Binding("down", "scroll_keys(1)", "Next key", show=False),
                Binding("up", "scroll_keys(-1)", "Previous key", show=False),
                Binding("pagedown", "scroll_keys(10)", show=False), Binding("pageup", "scroll_keys(-10)", show=False),
                Binding("home", "scroll_keys(-1000000000)", show=False)]
    skip: var[int] = var(0)  # the keys scrolled past: the first shown is the skip-th most hit

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.result: Result | None = None
        self.linear = False

    def show(self, result: Result | None, linear: bool) -> None:
        self.result, self.linear = result, linear
        self.skip = self.skip  # validated again: the new result may have fewer keys
        self.refresh()

    def validate_skip(self, skip: int) -> int:
        keys = len(self.result.entries) if self.result is not None and self.result.key_names else 0
        return max(0, min(skip, keys - 1))

    def watch_skip(self) -> None:
        self.refresh()

    def action_scroll_keys(self, by: int) -> None:
        self.skip += by

    def on_mouse_scroll_down(self) -> None:
        self.skip += 1

    def on_mouse_scroll_up(self) -> None:
        self.skip -= 1

    def lines(self) -> list[Text]:
        """What is drawn now (the tests read it)."""
        width, height = self.content_region.width, self.content_region.height
        return result_rows(self.result, self.linear, max(width, 20), max(height, 1), self.skip)[: max(height, 1)]

    def render(self) -> Text:
        return Text("\n").join(self.lines())
