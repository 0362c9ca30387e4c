"""What escaping untrusted text costs `kprobe-tui tail`: 100k events formatted and written as the command
does (fields escaped, stdout through PrintableStream), beside the unescaped formatting as reference.
Usage: python benchmarks/bench_textsafe.py"""

from __future__ import annotations

import io
import time
from pathlib import Path

from kprobe_tui.commands.tail import format_event
from kprobe_tui.stream.parser import LineParser
from kprobe_tui.textsafe import PrintableStream

LINES = Path(__file__).parents[1] / "tests" / "fixtures" / "trace_lines" / "uprobe_plain.txt"
COUNT, BATCH = 100_000, 500


def unescaped(event) -> str:
    """format_event as it was before textsafe: the reference."""
    if not event.event:
        return f"(unparsed) {event.body}"
    task = f"{event.comm}-{event.pid}" + (f"/{event.tgid}" if event.tgid not in (None, event.pid) else "")
    return f"{event.ts:.6f} [{event.cpu:03d}] {task} {event.event}: {event.body}"


def write_all(events, fmt, stream) -> float:
    start = time.perf_counter()
    for i in range(0, len(events), BATCH):
        stream.write("\n".join(map(fmt, events[i : i + BATCH])) + "\n")
    return time.perf_counter() - start


def main() -> None:
    parser = LineParser()
    events = parser.feed(LINES.read_text().splitlines()) + parser.flush()
    events = (events * (COUNT // len(events) + 1))[:COUNT]
    reference = min(write_all(events, unescaped, io.StringIO()) for _ in range(3))
    escaped = min(write_all(events, format_event, PrintableStream(io.StringIO())) for _ in range(3))
    print(f"{COUNT:,} events, {BATCH} per write")
    print(f"  reference (no escaping)      {reference * 1000:7.1f} ms  {reference / COUNT * 1e6:5.2f} us/event")
    print(f"  kprobe-tui tail (escaped)    {escaped * 1000:7.1f} ms  {escaped / COUNT * 1e6:5.2f} us/event")


if __name__ == "__main__":
    main()
