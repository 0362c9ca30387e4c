"""The user-space engine: our own trace instance, the stream reader, and the aggregator.

For kernels without hist triggers (this development machine's), for a filter the kernel's filter
language cannot say, or when asked (``--engine user``). The filter goes to the kernel wherever it
can (``filterexpr.push_down``), the rest is applied here; our own threads are left out in the
kernel (the golden rule: reading trace_pipe must not come back as events).

``StudentEngine`` is the same aggregator on events sampled through perf_event_open, for a user who
can make neither probes nor a trace instance: it counts an administrator's events, named as they
are (``existing_targets``), and writes nothing to tracefs.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from kprobe_tui.aggregate.kernel_engine import own_instance
from kprobe_tui.aggregate.model import Aggregation
from kprobe_tui.aggregate.tally import Tally
from kprobe_tui.aggregate.targets import Target, Targets
from kprobe_tui.aggregate.userspace import EventRole, StreamAggregator
from kprobe_tui.errors import UserError
from kprobe_tui.kernel import lifetime
from kprobe_tui.kernel.events import Events
from kprobe_tui.kernel.instance import resolve_events
from kprobe_tui.kernel.perfevent import TracepointSampler, read_event_id
from kprobe_tui.kernel.perfpipe import PerfRecordPipe
from kprobe_tui.kernel.tracefs import KernelRefused, Tracefs
from kprobe_tui.probes.spec import CompiledProbe, ProbeSpec
from kprobe_tui.stream import filterexpr
from kprobe_tui.stream.perfreader import PerfSource
from kprobe_tui.stream.reader import StreamReader, StreamUpdate

# Per CPU: a flood of uprobe hits (~50k/s a CPU) fills 4 MB in a couple of seconds if we stall.
BUFFER_KB = 4096
READER_INTERVAL = 0.05
_ENTRIES = re.compile(r"^entries: (\d+)", re.M)


class InstanceReader:
    """Our own trace instance and the reader of its trace_pipe: what the user-space engines share."""

    name = "user"
    method = "stream"

    def __init__(self, top: Tracefs) -> None:
        self.top = top
        self.instance = own_instance(top)
        self.reader: StreamReader | None = None
        self._reader_undo: int | None = None
        self._error = ""

    def _start_reader(self, on_data: Callable[[bytes], None]) -> None:
        self.reader = StreamReader(self.instance, None, self._on_update, READER_INTERVAL, on_data=on_data)
        self._reader_undo = lifetime.undo.push("trace_pipe reader", self.reader.stop)
        self.reader.start()
        self.instance.exclude_our_threads()  # the reader's included, here and in our other runs

    def _on_update(self, update: StreamUpdate) -> None:
        if update.error:
            self._error = update.error

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

    def _stop_reader(self) -> None:
        if self._reader_undo is not None:
            lifetime.undo.run(self._reader_undo)
            self._reader_undo = None

    def stop(self) -> None:
        self._stop_reader()  # the reader lets go of trace_pipe before the instance goes
        self.instance.remove()


class UserEngine(InstanceReader):
    def __init__(self, top: Tracefs, aggregation: Aggregation, targets: list[Target], arguments: dict[str, str],
                 filter_text: str = "") -> None:
        super().__init__(top)
        self.aggregation = aggregation
        self.targets = targets
        self.filter_text = filter_text
        self.aggregator = StreamAggregator(aggregation, [EventRole(t.event, t.label, t.role) for t in targets], arguments)
        self._lost = 0
        self.kernel_filters: dict[str, str] = {}  # event -> what the kernel applies
        self.view_filters: dict[str, str] = {}  # event -> why the view applies it

    def start(self) -> None:
        self.instance.create(BUFFER_KB, {"record-tgid": False})
        try:
            if self.aggregation.kind == "latency":
                # Entry and return may be on different CPUs: the per-CPU "local" clock is not comparable
                # across them. "global" is, and it is the clock the kernel engine's triggers switch to.
                self.instance.tracefs.write("trace_clock", "global", append=False)
            self._start_reader(self.aggregator.feed)
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
                        self._set_kernel_filter(target, text)
                    self.kernel_filters[target.event] = text or "(all)"
                    continue
                except KernelRefused as exc:
                    why = f"kernel refused: {exc.log.message if exc.log else exc.message}"
            self.view_filters[target.event] = why
            self.aggregator.set_view_filter(target.event, predicate)

    def _set_kernel_filter(self, target: Target, text: str) -> None:
        self.instance.set_filter(target.group, target.event, text)

    def collect(self) -> Tally:
        if self._error:
            raise UserError(self._error)
        tally = self.aggregator.take()
        lost = self.reader.lost if self.reader else 0
        tally.lost += lost - self._lost
        self._lost = lost
        return tally


def existing_targets(top: Tracefs, patterns: list[str], latency: bool = False) -> Targets:
    """Events that exist already (an administrator's probes), by name or glob, as a run's targets: nothing is
    made for them. Their arguments are named as the events name them. Latency takes two: the entry, then the return."""
    chosen = resolve_events(Events(top), patterns)
    if latency and len(chosen) != 2:
        raise UserError(f"latency of existing events takes an entry event and a return event, not {len(chosen)}",
                        "name both, e.g. probe:tcp_recvmsg probe:tcp_recvmsg__return")
    uprobes = {(event.group, event.event): event for event in Events(top).list() if event.is_uprobe}
    roles = ("entry", "return") if latency else ("hit",) * len(chosen)
    items = []
    for (group, event), role in zip(chosen, roles, strict=True):
        known = uprobes.get((group, event))
        # The spec says only what a run asks of it: an entry or a return, on a program or the kernel.
        binary = known.definition.split()[1].rpartition(":")[0] if known and len(known.definition.split()) > 1 else None
        spec = ProbeSpec(kind="return" if role == "return" else "entry", function=event, binary=binary, group=group, event=event)
        items.append(Target((CompiledProbe(spec, group, event, place=""),), event, role))
    return Targets(items, {})


class StudentEngine(UserEngine):
    """The user-space aggregator on events sampled through perf_event_open (as perf record -a samples them).

    For a user with no trace instance: the events are the administrator's (``existing_targets``); the
    filter goes to each perf event where the kernel can say it (PERF_EVENT_IOC_SET_FILTER), else here.
    ``instance`` is never created; closing the descriptors (the reader does as it ends) is the clean-up.
    """

    method = "perf"

    def __init__(self, top: Tracefs, aggregation: Aggregation, targets: list[Target], arguments: dict[str, str],
                 filter_text: str = "", perf: str = "") -> None:
        """``perf``: a perf binary that samples for us (set-up 2), else our own perf_event_open."""
        super().__init__(top, aggregation, targets, arguments, filter_text)
        self.sampler: TracepointSampler | PerfRecordPipe = PerfRecordPipe(perf, {}) if perf else TracepointSampler({})
        self.source = PerfSource(self.sampler, {})

    def start(self) -> None:
        try:
            for target in self.targets:
                name = f"{target.group}/{target.event}"
                ident = read_event_id(self.top.path(f"events/{name}"))
                self.source.add_format(ident, self.instance.event_format(target.group, target.event))
                self.sampler.add(name, ident)
            if self.filter_text:
                self._apply_filter()
            self.reader = StreamReader(self.instance, None, self._on_update, READER_INTERVAL,
                                       on_events=self.aggregator.add_events, source=self.source)
            self._reader_undo = lifetime.undo.push("perf_event_open reader", self.reader.stop)
            self.reader.start()
            self.sampler.enable()
        except BaseException:
            self.stop()
            raise

    def _set_kernel_filter(self, target: Target, text: str) -> None:
        try:
            self.sampler.set_filter(f"{target.group}/{target.event}", text)
        except OSError as exc:
            raise KernelRefused(f"the kernel refused the filter {text!r} on {target.group}/{target.event}: {exc.strerror}") from None

    def drain(self, limit: float = 2.0) -> None:
        """The reader's next read takes what the rings hold; then what it read waits for its names (HOLD_SECONDS)."""
        time.sleep(2 * READER_INTERVAL)
        super().drain(limit)

    def _buffered(self) -> int:
        """The samples the source still holds for their names."""
        return self.source.held

    def stop(self) -> None:
        super().stop()
        if self.reader is None or not self.reader.is_alive():
            self.sampler.close()  # the reader closes it as it ends; never started, it is ours to close
