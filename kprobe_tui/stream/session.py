"""One live tail: our instance, the chosen events enabled in it, a reader, a store and a filter.

The ``tail`` command and the events screen both drive a ``TailSession``; everything it puts in
the kernel is removed by ``stop()``, or by ``lifetime.undo`` when the run ends another way. A user
who cannot make an instance may be let sample the events instead (``StudentSession``: perf's way,
nothing written to tracefs); ``open_session`` gives each user the one it can have.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kprobe_tui.errors import UserError
from kprobe_tui.kernel import access, lifetime
from kprobe_tui.kernel.instance import Instance, resolve_events
from kprobe_tui.kernel.perfevent import TracepointSampler, read_event_id
from kprobe_tui.kernel.perfpipe import PerfRecordPipe
from kprobe_tui.kernel.tracefs import KernelRefused, Tracefs
from kprobe_tui.stream import filterexpr
from kprobe_tui.stream.parser import Event
from kprobe_tui.stream.perfreader import PerfSource
from kprobe_tui.stream.reader import EventSource, StreamReader, StreamUpdate
from kprobe_tui.stream.store import DEFAULT_CAPACITY, EventStore


@dataclass
class FilterPlan:
    """Where the current filter runs: the text, and per tailed event the kernel filter or why not."""

    text: str = ""
    kernel: dict[str, str] = field(default_factory=dict)  # "group/event" -> filter written to it
    view_only: dict[str, str] = field(default_factory=dict)  # "group/event" -> reason

    def summary(self) -> str:
        if not self.text:
            return "no filter"
        parts = []
        if self.kernel:
            parts.append("kernel: " + ", ".join(sorted(self.kernel)))
        if self.view_only:
            parts.append("view only: " + "; ".join(f"{name} ({why})" for name, why in sorted(self.view_only.items())))
        return " | ".join(parts) or "view"


class TailSession:
    def __init__(self, top: Tracefs, patterns: list[str], max_events: int = DEFAULT_CAPACITY,
                 buffer_kb: int | None = None, stacktrace: bool = False, store: EventStore | None = None) -> None:
        """Resolves ``patterns`` now (a UserError names one that matches nothing); nothing is made yet."""
        self.top = top
        self.instance = Instance(top)
        self.targets = resolve_events(self.instance.events, patterns)
        self.store = store if store is not None else EventStore(max_events)
        self.buffer_kb = buffer_kb
        self.stacktrace = stacktrace
        self.plan = FilterPlan()
        self.reader: StreamReader | None = None
        self._reader_undo: int | None = None
        self.paused = False

    def start(self, on_update: Callable[[StreamUpdate], None],
              on_events: Callable[[list[Event]], None] | None = None, interval: float = 0.05,
              filter_text: str = "") -> None:
        """Create the instance, enable the events in it (filtered from the first event), start reading."""
        if filter_text:
            filterexpr.parse(filter_text)  # a bad filter fails before anything is made
        source = self._open()
        try:
            # The binary pages where the events' formats compile (choose_source), else the text, which
            # KPROBE_TUI_READER=text asks for: 735k against 183k events a CPU-second (benchmarks/bench_stream.py).
            self.reader = StreamReader(self.instance, self.store, on_update, interval, on_events, source=source,
                                       events=self.targets)
            # Undo runs newest first: the reader lets go of trace_pipe before the instance is removed.
            self._reader_undo = lifetime.undo.push("trace_pipe reader", self.reader.stop)
            self.reader.start()
            self._exclude_ourselves()
            if filter_text:
                self.set_filter(filter_text)
            for group, event in self.targets:
                self._enable(group, event)
        except BaseException:
            self.stop()
            raise

    def _open(self) -> EventSource | None:
        """Make what the reader reads (None: the instance's trace_pipe)."""
        self.instance.create(self.buffer_kb, {"record-tgid": True, "stacktrace": self.stacktrace})
        return None

    def _exclude_ourselves(self) -> None:
        # The reader's own reads and stats polls must not come back as events: exclude every
        # thread we have, the reader's included, before anything is enabled (and in our other runs).
        self.instance.exclude_our_threads()

    def _enable(self, group: str, event: str) -> None:
        self.instance.enable(group, event)

    def _disable(self, group: str, event: str) -> None:
        self.instance.disable(group, event)

    def add(self, patterns: list[str]) -> list[tuple[str, str]]:
        """Record more events (``resolve_events`` patterns), under the current filter; returns the new ones."""
        added = [target for target in resolve_events(self.instance.events, patterns) if target not in self.targets]
        for group, event in added:
            self.switch(group, event, True)
        return added

    def switch(self, group: str, event: str, on: bool) -> None:
        """Start or stop recording one event; the filter in force applies to it from its first event."""
        if not on:
            self._disable(group, event)
            if (group, event) in self.targets:
                self.targets.remove((group, event))
            return
        if (group, event) not in self.targets:
            self.targets.append((group, event))
        if self.plan.text:
            self.set_filter(self.plan.text)
        self._enable(group, event)

    def stop(self) -> None:
        """Stop reading and remove everything this session made in the kernel."""
        if self._reader_undo is not None:
            lifetime.undo.run(self._reader_undo)
            self._reader_undo = None
        self.instance.remove()

    def set_filter(self, text: str) -> FilterPlan:
        """Apply a filter in the view and, per event where the kernel can say it, in the kernel.

        A filter that does not parse raises FilterError and leaves the current filter in place.
        """
        text = text.strip()
        if not text:
            self.store.set_filter(None)
            for group, event in self.targets:
                self._clear_kernel_filter(group, event)
            self.plan = FilterPlan()
            return self.plan
        node = filterexpr.parse(text)
        by_name = {event: (group, event) for group, event in self.targets}
        fields: dict[str, dict[str, str] | None] = {}
        layouts: dict[str, dict[str, tuple[int, bool]]] = {}
        for group, event in self.targets:
            try:
                format_text = self.instance.event_format(group, event)
            except UserError:
                fields[event] = None
                continue
            fields[event] = filterexpr.field_kinds(format_text)
            layouts[event] = filterexpr.field_layout(format_text)
        pushed = filterexpr.push_down(node, fields, layouts)
        plan = FilterPlan(text)
        for event, reason in pushed.view_only.items():
            self._clear_kernel_filter(*by_name[event])
            plan.view_only["/".join(by_name[event])] = reason
        for event in pushed.never:
            self._clear_kernel_filter(*by_name[event])
            plan.view_only["/".join(by_name[event])] = "never matches"
        for event, kernel_text in pushed.kernel.items():
            name = "/".join(by_name[event])
            if not kernel_text:
                self._clear_kernel_filter(*by_name[event])
                plan.kernel[name] = "(all)"
                continue
            try:
                self._set_kernel_filter(*by_name[event], kernel_text)
                plan.kernel[name] = kernel_text
            except KernelRefused as exc:
                self._clear_kernel_filter(*by_name[event])
                plan.view_only[name] = f"kernel refused: {exc.log.message if exc.log else exc.message}"
        self.store.set_filter(filterexpr.compile_filter(node))
        self.plan = plan
        return plan

    def _set_kernel_filter(self, group: str, event: str, expression: str) -> None:
        self.instance.set_filter(group, event, expression)

    def _clear_kernel_filter(self, group: str, event: str) -> None:
        if self.instance.event_exists(group, event):
            self.instance.clear_filter(group, event)

    def pause(self, paused: bool) -> None:
        """Stop or restart recording in our instance (events meanwhile are not recorded)."""
        self.instance.tracefs.write("tracing_on", "0" if paused else "1", append=False)
        self.paused = paused

    def set_stacktrace(self, on: bool) -> None:
        self.instance.set_option("stacktrace", on)
        self.stacktrace = on


def open_session(top: Tracefs, patterns: list[str], max_events: int = DEFAULT_CAPACITY, stacktrace: bool = False,
                 store: EventStore | None = None) -> TailSession:
    """The session this user can have (``access.choose_reader``): a UserError naming the set-ups when none."""
    if top.writable:  # a snapshot's: TailSession says it cannot be tailed
        reader = access.choose_reader(top.root)
        if not reader.kind:
            raise UserError(f"cannot tail here: {reader.why}", reader.hint)
        if reader.kind.startswith("perf"):
            session = StudentSession(top, patterns, max_events, stacktrace=stacktrace, store=store)
            session.perf = reader.perf
            return session
    return TailSession(top, patterns, max_events, stacktrace=stacktrace, store=store)


class StudentSession(TailSession):
    """A tail for a user who cannot make a trace instance: the events sampled through perf_event_open.

    Nothing is written to tracefs (no instance, no enable, no filter file): the administrator's events
    are opened as ``perf record -e GROUP:EVENT -a`` opens them, whether or not they are enabled in
    tracefs (a perf event is the kernel's own registration of the tracepoint, independent of the
    ``enable`` file), so a student follows exactly the events they name, as with perf. Also as with
    perf, the event's tracefs ``filter`` (the administrator's) does not apply: the kernel keeps it for
    tracefs buffers. The filter goes to each perf event (PERF_EVENT_IOC_SET_FILTER). Closing the
    descriptors is the whole clean-up, which the kernel also does when the process is killed.
    ``instance`` is never created: it keeps the list of what is followed for the reader's check of
    deleted events and the app's "is it on".

    With ``perf`` set (a perf binary that may sample when we may not: set-up 2), that perf's ``perf record``
    is the sampler (kernel/perfpipe.py): the same events, its filter on its command line.
    """

    sampler: TracepointSampler | PerfRecordPipe
    source: PerfSource
    perf = ""  # the perf binary that samples for us, if any

    def _open(self) -> EventSource | None:
        if self.stacktrace:
            raise UserError("--stacktrace needs a trace instance, which you cannot make here",
                            "tail without --stacktrace, or ask for write access to tracefs/instances")
        ids = {target: read_event_id(self.top.path(f"events/{target[0]}/{target[1]}")) for target in self.targets}
        formats = {ident: self.instance.event_format(*target) for target, ident in ids.items()}
        names = [f"{group}/{event}" for group, event in ids]
        self.sampler = PerfRecordPipe(self.perf, dict.fromkeys(names, "")) if self.perf else TracepointSampler({})
        try:
            self.source = PerfSource(self.sampler, formats)
            for name, ident in zip(names, ids.values(), strict=True):
                self.sampler.add(name, ident)
        except BaseException:
            self.sampler.close()
            raise
        return self.source

    def _exclude_ourselves(self) -> None:
        """Our own samples are dropped by the source (a filter on our threads would cost the kernel a test a hit)."""

    def _enable(self, group: str, event: str) -> None:
        name = f"{group}/{event}"
        if name not in self.sampler.ids:
            ident = read_event_id(self.top.path(f"events/{group}/{event}"))
            self.source.add_format(ident, self.instance.event_format(group, event))
            self.sampler.add(name, ident)
        if (group, event) not in self.instance.enabled:
            self.instance.enabled.append((group, event))
        if not self.paused:
            self.sampler.enable()

    def _disable(self, group: str, event: str) -> None:
        self.sampler.remove(f"{group}/{event}")
        if (group, event) in self.instance.enabled:
            self.instance.enabled.remove((group, event))

    def _set_kernel_filter(self, group: str, event: str, expression: str) -> None:
        name = f"{group}/{event}"
        if name not in self.sampler.ids:
            return  # not opened yet: it is filtered when it is (switch sets the filter again)
        try:
            self.sampler.set_filter(name, expression)
        except OSError as exc:
            raise KernelRefused(f"the kernel refused the filter {expression!r} on {name}: {exc.strerror}") from None

    def _clear_kernel_filter(self, group: str, event: str) -> None:
        if f"{group}/{event}" in self.sampler.ids:
            self._set_kernel_filter(group, event, "")

    def stop(self) -> None:
        super().stop()
        if self.reader is None or not self.reader.is_alive():
            self.sampler.close()  # the reader closes it as it ends; never started, it is ours to close

    def pause(self, paused: bool) -> None:
        """Stop or restart sampling (events meanwhile are not recorded)."""
        if paused:
            self.sampler.disable()
        else:
            self.sampler.enable()  # a perf binary: started again
        self.paused = paused

    def set_stacktrace(self, on: bool) -> None:
        raise UserError("stack traces need a trace instance, which you cannot make here",
                        "ask for write access to tracefs/instances")
