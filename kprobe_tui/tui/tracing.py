"""This run's tracing session, an app-level service that screens ask.

One trace instance per run (``instances/kptui_<pid>``) records the events the user chose: the
events screen starts it and shows it, the probes panel switches events on and off in it, and a
screen that samples the kernel (the statistics view) asks it what is on; none of them reaches into
another screen. Everything that writes to the kernel runs off the UI thread, one change at a time
in the order asked (the app's ``tracing`` lane); what records is answered at once, from memory.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from textual.app import App

from kprobe_tui import blocking
from kprobe_tui.errors import UserError
from kprobe_tui.kernel.tracefs import Tracefs
from kprobe_tui.stream.reader import StreamUpdate
from kprobe_tui.stream.session import FilterPlan, TailSession, open_session
from kprobe_tui.stream.store import EventStore
from kprobe_tui.tui.work import Background

Then = Callable[[Any], object] | None
Failed = Callable[[UserError], object] | None


class RunTracing:
    """The session (None until something records), and the changes screens ask of it."""

    def __init__(self, app: App, tracefs: Tracefs | None) -> None:
        self.tracefs = tracefs
        self.session: TailSession | None = None
        self._work = Background(app)
        self._lock = threading.Lock()  # one change at a time, and close() waits for the one under way
        self._closed = False

    @classmethod
    def of(cls, app: App, tracefs: Tracefs | None) -> RunTracing:
        """The app's service (kprobe-tui's has one from the start; a bare Textual app hosting one
        screen, as tests and benchmarks do, gets one on first use)."""
        service = getattr(app, "tracing", None)
        if not isinstance(service, RunTracing):
            service = cls(app, tracefs)
            app.tracing = service  # type: ignore[attr-defined]
        return service

    # --- what records (UI thread, from memory) ------------------------------------------------------

    @property
    def recording(self) -> bool:
        return self.session is not None

    def is_on(self, group: str, event: str) -> bool:
        return self.session is not None and (group, event) in self.session.instance.enabled

    @property
    def instance_name(self) -> str | None:
        return self.session.instance.name if self.session is not None else None

    # --- changes (off the UI thread, in order) ------------------------------------------------------

    def start(self, patterns: list[str], store: EventStore, on_update: Callable[[StreamUpdate], None],
              then: Then = None, failed: Failed = None) -> None:
        """Record ``patterns`` (``group/event`` globs; [] = every probe event) into ``store``; the
        reader thread hands each batch to ``on_update``. ``then`` gets the session once it records."""
        self._work.queue("tracing", self._start, patterns, store, on_update, then=then, failed=failed)

    def _start(self, patterns: list[str], store: EventStore, on_update: Callable[[StreamUpdate], None]) -> TailSession:
        with self._lock:
            return self._start_locked(patterns, store, on_update)

    def _start_locked(self, patterns: list[str], store: EventStore,
                      on_update: Callable[[StreamUpdate], None]) -> TailSession:
        if self._closed:
            raise UserError("the app is closing")
        if self.tracefs is None:
            raise UserError("no tracefs to record from (a snapshot is read-only)")
        if self.session is not None:
            raise UserError(f"this run already records in {self.session.instance.name}",
                            "its events screen shows them (e: events)")
        session = open_session(self.tracefs, patterns, store=store)  # a student's: perf_event_open (issue 23)
        session.start(on_update)
        self.session = session
        return session

    def add(self, patterns: list[str], then: Then = None, failed: Failed = None) -> None:
        """Record more events in the running session (``then`` gets the ``(group, event)`` added)."""
        self._work.queue("tracing", self._recording("add"), patterns, then=then, failed=failed)

    def switch(self, group: str, event: str, on: bool, then: Then = None, failed: Failed = None) -> None:
        """One event on or off in this run's instance (the instance's own list of what is on kept right)."""
        self._work.queue("tracing", self._recording("switch"), group, event, on, then=then, failed=failed)

    def set_filter(self, text: str, then: Callable[[FilterPlan], object] | None = None, failed: Failed = None) -> None:
        """The events screen's filter, pushed to the kernel where it can be (``then`` gets the plan)."""
        self._work.queue("tracing", self._recording("set_filter"), text, then=then, failed=failed)

    def pause(self, paused: bool, then: Then = None, failed: Failed = None) -> None:
        self._work.queue("tracing", self._recording("pause"), paused, then=then, failed=failed)

    def set_stacktrace(self, on: bool, then: Then = None, failed: Failed = None) -> None:
        self._work.queue("tracing", self._recording("set_stacktrace"), on, then=then, failed=failed)

    def stop(self, then: Then = None) -> None:
        """Stop recording and remove the instance (what was recorded stays in its store)."""
        self._work.queue("tracing", self._stop, then=then)

    def _stop(self) -> None:
        with self._lock:
            session, self.session = self.session, None
            if session is not None:
                session.stop()

    def close(self) -> None:
        """The app is closing: stop recording now, on this thread (nothing is left to keep responsive,
        and the instance must be gone when the app is), after the change under way; none after it."""
        with self._lock:
            self._closed = True
        with blocking.knowingly():
            self._stop()

    def _recording(self, method: str) -> Callable[..., Any]:
        """The running session's ``method``, or a UserError when nothing records (stopped meanwhile)."""

        def call(*args: Any) -> Any:
            with self._lock:
                if self.session is None:
                    raise UserError("nothing records in this run's instance",
                                    "tail an event first (t in the probes panel)")
                return getattr(self.session, method)(*args)

        return call
