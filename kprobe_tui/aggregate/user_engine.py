"""The user-space engine: our own trace instance, the stream reader, and the aggregator.

For kernels without hist triggers (this development machine's), for a filter the kernel's filter
language cannot say, or when asked (``--engine user``). The filter goes to the kernel wherever it
can (``filterexpr.push_down``), the rest is applied here; our own threads are left out in the
kernel (the golden rule: reading trace_pipe must not come back as events).
"""

from __future__ import annotations

import os
import re
import time

from kprobe_tui.aggregate.kernel_engine import own_instance
from kprobe_tui.aggregate.model import Aggregation
from kprobe_tui.aggregate.tally import Tally
from kprobe_tui.aggregate.targets import Target
from kprobe_tui.aggregate.userspace import EventRole, StreamAggregator
from kprobe_tui.errors import UserError
from kprobe_tui.kernel import lifetime
from kprobe_tui.kernel.tracefs import KernelRefused, Tracefs
from kprobe_tui.stream import filterexpr
from kprobe_tui.stream.reader import StreamReader, StreamUpdate

# Per CPU: a flood of uprobe hits (~50k/s a CPU) fills 4 MB in a couple of seconds if we stall.
BUFFER_KB = 4096
READER_INTERVAL = 0.05
_ENTRIES = re.compile(r"^entries: (\d+)", re.M)


class UserEngine:
    name = "user"
    method = "stream"

    def __init__(self, top: Tracefs, aggregation: Aggregation, targets: list[Target], arguments: dict[str, str],
                 filter_text: str = "") -> None:
        self.top = top
        self.aggregation = aggregation
        self.targets = targets
        self.filter_text = filter_text
        self.instance = own_instance(top)
        self.aggregator = StreamAggregator(aggregation, [EventRole(t.event, t.label, t.role) for t in targets], arguments)
        self.reader: StreamReader | None = None
        self._reader_undo: int | None = None
        self._lost = 0
        self._error = ""
        self.kernel_filters: dict[str, str] = {}  # event -> what the kernel applies
        self.view_filters: dict[str, str] = {}  # event -> why the view applies it

    def start(self) -> None:
        self.instance.create(BUFFER_KB, {"record-tgid": False})
        try:
            if self.aggregation.kind == "latency":
                # Entry and return may be on different CPUs: the per-CPU "local" clock is not comparable
                # across them. "global" is, and it is the clock the kernel engine's triggers switch to.
                self.instance.tracefs.write("trace_clock", "global", append=False)
            self.reader = StreamReader(self.instance, None, self._on_update, READER_INTERVAL,
                                       on_data=self.aggregator.feed)
            self._reader_undo = lifetime.undo.push("trace_pipe reader", self.reader.stop)
            self.reader.start()
            self.instance.exclude_threads([int(tid) for tid in os.listdir("/proc/self/task")])
            if self.filter_text:
                self._apply_filter()
            for target in self.targets:
                self.instance.enable(target.group, target.event)
        except BaseException:
            self.stop()
            raise

    def _apply_filter(self) -> None:
        """The filter in the kernel per event where it can be said, in the aggregator where not.
        A return has none (its arguments are the entry's): unmatched returns are left unpaired."""
        node = filterexpr.parse(self.filter_text)
        predicate = filterexpr.compile_filter(node)
        for target in self.targets:
            if target.role == "return":
                continue
            format_text = self.instance.event_format(target.group, target.event)
            pushed = filterexpr.push_down(node, {target.event: filterexpr.field_kinds(format_text)},
                                          {target.event: filterexpr.field_layout(format_text)})
            text = pushed.kernel.get(target.event)
            if text is None:
                why = pushed.view_only.get(target.event, "never matches")
            else:
                try:
                    if text:
                        self.instance.set_filter(target.group, target.event, text)
                    self.kernel_filters[target.event] = text or "(all)"
                    continue
                except KernelRefused as exc:
                    why = f"kernel refused: {exc.log.message if exc.log else exc.message}"
            self.view_filters[target.event] = why
            self.aggregator.set_view_filter(target.event, predicate)

    def _on_update(self, update: StreamUpdate) -> None:
        if update.error:
            self._error = update.error

    def collect(self) -> Tally:
        if self._error:
            raise UserError(self._error)
        tally = self.aggregator.take()
        lost = self.reader.lost if self.reader else 0
        tally.lost += lost - self._lost
        self._lost = lost
        return tally

    def drain(self, limit: float = 2.0) -> None:
        """Before the last sample: let the reader take what the kernel still holds (a workload that just
        ended may have events in the ring the reader has not reached)."""
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline and self._buffered():
            time.sleep(READER_INTERVAL / 2)
        time.sleep(2 * READER_INTERVAL)  # the last read's lines reach the aggregator

    def _buffered(self) -> int:
        total = 0
        for stats in self.instance.tracefs.path("per_cpu").glob("cpu*/stats"):
            try:
                total += sum(int(n) for n in _ENTRIES.findall(stats.read_text()))
            except OSError:
                continue
        return total

    def stop(self) -> None:
        if self._reader_undo is not None:
            lifetime.undo.run(self._reader_undo)  # the reader lets go of trace_pipe before the instance goes
            self._reader_undo = None
        self.instance.remove()
