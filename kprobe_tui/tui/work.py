"""The one way the TUI runs work off the UI thread: Textual thread workers, answers back on the UI thread.

A screen makes one ``Background`` and runs everything that blocks through it (reading DWARF,
compiling a probe, writing tracefs, reading a catalog, sampling counters). Each kind of work is a
*lane*, a Textual worker group: a new run in a lane cancels the one before (exclusive), and since
a thread cannot be stopped mid-question, the older answer, if it still comes, is stale and
dropped: every run takes the lane's next generation, and only the newest is handed over (as
Textual's ``Log`` and ``DirectoryTree`` drop theirs). Answers are handed over with
``call_from_thread``, on the UI thread, unless the screen is gone.

    self.work = Background(self)
    self.work.run("preview", build_preview, request, then=self.show_preview, wait=0.15)
    self.work.every(1.0, "sample", read_sample, then=self.show_sample)
    self.work.queue("kernel", events.delete, event, then=self.deleted)   # every one, in order

``then`` gets the answer; a ``UserError`` goes to ``failed`` (default: a notification). Anything else
raised is a bug and ends the app with its traceback, as Textual does for any worker.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from textual.app import App
from textual.timer import Timer
from textual.widget import Widget
from textual.worker import Worker, WorkerState, get_current_worker

from kprobe_tui.errors import UserError

_DONE = (WorkerState.SUCCESS, WorkerState.ERROR, WorkerState.CANCELLED)


class Background:
    """Lanes of thread workers owned by ``node`` (their workers end with it)."""

    def __init__(self, node: App | Widget) -> None:
        self.node = node
        self._generations: dict[str, int] = {}
        self._workers: dict[str, Worker] = {}
        self._queues: dict[str, deque] = {}
        self._draining: set[str] = set()
        self._lock = threading.Lock()

    def run(self, lane: str, function: Callable[..., Any], *args: Any, then: Callable[[Any], object] | None = None,
            failed: Callable[[UserError], object] | None = None, wait: float = 0.0,
            progress: Callable[[Any], object] | None = None) -> Worker:
        """``function(*args)`` in a thread, its answer to ``then`` on the UI thread unless a newer run
        of ``lane`` started meanwhile. ``wait``: seconds to wait first (a debounce: a newer run
        cancels this one before it starts working). ``progress``: passed to ``function`` as its
        ``progress`` keyword, a function the thread calls with reports that reach this callback
        on the UI thread (while the run is still the lane's newest)."""
        generation = self._generations[lane] = self._generations.get(lane, 0) + 1
        app = self.node.app

        def current() -> bool:
            return self._generations.get(lane) == generation and not self._gone()

        def hand_over(callback: Callable[[Any], object], answer: Any) -> None:
            if current():
                callback(answer)

        def report(item: Any) -> None:  # in the thread
            if not get_current_worker().is_cancelled:
                app.call_from_thread(hand_over, progress, item)

        def body() -> None:
            worker = get_current_worker()
            if wait:
                time.sleep(wait)
                if worker.is_cancelled:
                    return
            try:
                answer = function(*args, progress=report) if progress is not None else function(*args)
            except UserError as error:
                callback, answer = failed or self._notify, error
            else:
                callback = then or _ignore
            if not worker.is_cancelled:
                app.call_from_thread(hand_over, callback, answer)

        worker = self.node.run_worker(body, name=lane, group=lane, exclusive=True, thread=True)
        self._workers[lane] = worker
        return worker

    def queue(self, lane: str, function: Callable[..., Any], *args: Any, then: Callable[[Any], object] | None = None,
              failed: Callable[[UserError], object] | None = None) -> None:
        """``function(*args)`` once every earlier ``queue`` of ``lane`` is done, one at a time, in the
        order asked: for changes that must all happen, in order (writes to the kernel), where ``run``
        would drop all but the newest. Every answer is handed over (while the node is up)."""
        with self._lock:
            self._queues.setdefault(lane, deque()).append((function, args, then, failed))
            if lane in self._draining:
                return
            self._draining.add(lane)
        app = self.node.app

        def hand_over(callback: Callable[[Any], object], answer: Any) -> None:
            if not self._gone():
                callback(answer)

        def drain() -> None:
            worker = get_current_worker()
            while True:
                with self._lock:
                    if not self._queues[lane] or worker.is_cancelled:
                        self._draining.discard(lane)
                        return
                    function, args, then, failed = self._queues[lane].popleft()
                try:
                    answer = function(*args)
                except UserError as error:
                    callback, answer = failed or self._notify, error
                else:
                    callback = then or _ignore
                app.call_from_thread(hand_over, callback, answer)

        self._workers[lane] = self.node.run_worker(drain, name=lane, group=lane, thread=True)

    def busy(self, lane: str) -> bool:
        """Whether the lane's newest run is still working."""
        worker = self._workers.get(lane)
        return worker is not None and worker.state not in _DONE

    def every(self, seconds: float, lane: str, function: Callable[..., Any], *args: Any,
              then: Callable[[Any], object] | None = None, failed: Callable[[UserError], object] | None = None) -> Timer:
        """Run ``function`` now and then every ``seconds`` (a tick is skipped while the last run still
        works, so a slow kernel never piles runs up); stop it with the returned timer's ``stop()``."""

        def tick() -> None:
            if not self.busy(lane):
                self.run(lane, function, *args, then=then, failed=failed)

        tick()
        return self.node.set_interval(seconds, tick)

    def forget(self, lane: str) -> None:
        """Drop whatever the lane's running work answers (the screen no longer wants it)."""
        self._generations[lane] = self._generations.get(lane, 0) + 1
        worker = self._workers.pop(lane, None)
        if worker is not None:
            worker.cancel()

    def _gone(self) -> bool:
        """Removed (or the app ending). A screen not mounted yet is not gone: work it starts while it is
        made (the builder's first compile) answers before its widgets exist, so its ``then`` may have
        to keep the answer until ``on_mount``."""
        return self.node.is_mounted and not self.node.is_attached

    def _notify(self, error: UserError) -> None:
        self.node.app.notify(str(error), severity="error", timeout=15)


def _ignore(_answer: Any) -> None:
    pass
