"""One live tail: our instance, the chosen events enabled in it, a reader, a store and a filter.

The ``tail`` command and the events screen both drive a ``TailSession``; everything it puts in
the kernel is removed by ``stop()``, or by ``lifetime.undo`` when the run ends another way.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable

from kprobe_tui.errors import UserError
from kprobe_tui.kernel import lifetime
from kprobe_tui.kernel.instance import Instance, resolve_events
from kprobe_tui.kernel.tracefs import KernelRefused, Tracefs
from kprobe_tui.stream import filterexpr
from kprobe_tui.stream.parser import Event
from kprobe_tui.stream.reader import StreamReader, StreamUpdate
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
        self.instance.create(self.buffer_kb, {"record-tgid": True, "stacktrace": self.stacktrace})
        try:
            self.reader = StreamReader(self.instance, self.store, on_update, interval, on_events)
            # Undo runs newest first: the reader lets go of trace_pipe before the instance is removed.
            self._reader_undo = lifetime.undo.push("trace_pipe reader", self.reader.stop)
            self.reader.start()
            # The reader's own reads and stats polls must not come back as events: exclude every
            # thread we have, the reader's included, before anything is enabled.
            self.instance.exclude_threads([int(tid) for tid in os.listdir("/proc/self/task")])
            if filter_text:
                self.set_filter(filter_text)
            for group, event in self.targets:
                self.instance.enable(group, event)
        except BaseException:
            self.instance.remove()
            raise

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
                self.instance.set_filter(*by_name[event], kernel_text)
                plan.kernel[name] = kernel_text
            except KernelRefused as exc:
                self._clear_kernel_filter(*by_name[event])
                plan.view_only[name] = f"kernel refused: {exc.log.message if exc.log else exc.message}"
        self.store.set_filter(filterexpr.compile_filter(node))
        self.plan = plan
        return plan

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
