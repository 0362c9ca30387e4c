"""A ``Result`` as text, in the layout bpftrace and bcc users read: range, count, a bar of ``@``.

    @usecs:
    [256, 512)             3 |@@@@@@@@@@@@@                                       |
    [512, 1K)             12 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|

Counts are a table like bcc's funccount, largest last, with the same bar. Text that came from
the traced system (comm, string keys) goes through the ``escape`` the caller gives: this core
does not know the terminal.
"""

from __future__ import annotations

from collections.abc import Callable

from kprobe_tui.aggregate.model import Aggregation, Linear
from kprobe_tui.aggregate.result import Bucket, Result, Stats

BAR_WIDTH = 52  # bpftrace's
_SUFFIXES = ((1 << 60, "E"), (1 << 50, "P"), (1 << 40, "T"), (1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K"))


def power_label(value: int) -> str:
    """bpftrace's bucket bounds: 1024 -> 1K, 3 << 20 -> 3M; other numbers as they are."""
    for size, suffix in _SUFFIXES:
        if value and value % size == 0:
            return f"{value // size}{suffix}"
    return str(value)


def bucket_label(bucket: Bucket, linear: bool) -> str:
    number = str if linear else power_label
    if bucket.low is None:
        assert bucket.high is not None, "no bucket is open at both ends (Log2.bounds, Linear.bounds)"
        return f"(..., {number(bucket.high)})"
    if bucket.high is None:
        return f"[{number(bucket.low)}, ...)"
    if not linear and bucket.high - bucket.low == 1:
        return f"[{number(bucket.low)}]"
    return f"[{number(bucket.low)}, {number(bucket.high)})"


def bar(count: int, most: int, width: int = BAR_WIDTH) -> str:
    filled = count * width // most if most else 0
    return "|" + "@" * filled + " " * (width - filled) + "|"


def histogram_lines(buckets: tuple[Bucket, ...], linear: bool) -> list[str]:
    if not buckets:
        return ["(no hits)"]
    labels = [bucket_label(bucket, linear) for bucket in buckets]
    label_width = max(16, *map(len, labels))
    most = max(bucket.count for bucket in buckets)
    count_width = max(8, len(str(most)))
    return [f"{label:<{label_width}} {bucket.count:>{count_width}} {bar(bucket.count, most)}"
            for label, bucket in zip(labels, buckets)]


def _number(value: float | int | None) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}" if isinstance(value, float) else str(value)


def stats_line(stats: Stats, unit: str | None) -> str:
    suffix = f" ({unit})" if unit else ""
    return (f"count {stats.count}, avg {_number(stats.avg)}, min {_number(stats.min)}, max {_number(stats.max)}, "
            f"sum {_number(stats.sum)}{suffix}")


def render(result: Result, aggregation: Aggregation, escape: Callable[[str], str] = str) -> list[str]:
    """The lines of one table (an interval's, or the whole run's)."""
    if result.kind == "count":
        lines = _count_lines(result, escape)
    else:
        lines = _distribution_lines(result, aggregation, escape)
    return lines + _notes(result)


def _key_text(key: tuple, escape: Callable[[str], str]) -> list[str]:
    return [escape(part) if isinstance(part, str) else str(part) for part in key]


def _key_head(name: str, key: tuple, escape: Callable[[str], str]) -> list[str]:
    """``@len[dd, 3]:``; a stack key as bpftrace prints ``@[kstack]``: a frame a line, innermost first, four
    spaces in, then ``]:`` (or ``, comm]:``), as ``count --by stack`` prints it too."""
    text = f"{name}["
    for index, part in enumerate(key):
        if isinstance(part, tuple):
            text += "\n" + "".join(f"    {escape(frame)}\n" for frame in reversed(part))
        else:
            text += (", " if index else "") + _key_text((part,), escape)[0]
    return f"{text}]:".split("\n")


def _count_lines(result: Result, escape: Callable[[str], str]) -> list[str]:
    names = [name.upper() for name in result.key_names]
    rows = [(_key_text(entry.key, escape), entry.count) for entry in reversed(result.entries)]  # largest last
    if not names:
        return [f"COUNT {result.count}"]
    widths = [max(len(name), *(len(key[i]) for key, _ in rows)) if rows else len(name) for i, name in enumerate(names)]
    most = max((count for _, count in rows), default=0)
    count_width = max(8, len(str(most)))
    lines = ["  ".join(f"{name:<{width}}" for name, width in zip(names, widths)) + f"  {'COUNT':>{count_width}}"]
    for key, count in rows:
        cells = "  ".join(f"{part:<{width}}" for part, width in zip(key, widths))
        lines.append(f"{cells}  {count:>{count_width}} {bar(count, most, 40)}")
    if not rows:
        lines.append("(no hits)")
    return lines


def _distribution_lines(result: Result, aggregation: Aggregation, escape: Callable[[str], str]) -> list[str]:
    linear = isinstance(aggregation.buckets, Linear)
    name = f"@{result.value_name}"
    lines: list[str] = []
    if result.key_names:
        for entry in result.entries:
            lines += _key_head(name, entry.key, escape)
            lines += histogram_lines(entry.buckets or (), linear)
            lines.append(stats_line(entry.stats, result.unit))
            lines.append("")
        if not result.entries:
            lines += [f"{name}:", "(no hits)"]
        return lines[:-1] if lines and lines[-1] == "" else lines
    lines.append(f"{name}:")
    lines += histogram_lines(result.buckets or (), linear)
    lines.append(stats_line(result.total, result.unit))
    return lines


def _notes(result: Result) -> list[str]:
    notes = []
    if result.others:
        notes.append(f"({result.others} more hits in keys beyond --top)")
    if result.dropped:
        notes.append(f"dropped: {result.dropped} hits did not fit in the kernel's table (more distinct keys than "
                     "its size): the numbers above leave them out")
    if result.lost:
        notes.append(f"lost: {result.lost} hits the kernel did not record or hand over (a full ring buffer, or a "
                     "kretprobe with every slot taken): the numbers above leave them out")
    if result.unmatched:
        notes.append(f"unmatched: {result.unmatched} returns had no timed entry on their thread (a nested or recursive "
                     "call: only the innermost is timed; or an entry before the start or left out by the filter)")
    return notes
