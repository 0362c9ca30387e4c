"""This run's own tracefs instance: a private ring buffer and trace_pipe.

``trace_pipe`` readers are exclusive (since 6.5) and the top-level buffer is shared with perf
and other tools, so each run records into ``instances/kptui_<pid>``: its own buffer size and
options, its events enabled there only. The instance is registered with ``lifetime.undo`` and
removed when the run ends (events disabled first, then rmdir); after SIGKILL,
``Events.cleanup()`` removes it as stale.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import re
import threading
import weakref

from kprobe_tui.errors import UserError
from kprobe_tui.kernel import lifetime
from kprobe_tui.kernel.events import Events
from kprobe_tui.kernel.tracefs import Tracefs

_STATS_FIELD = re.compile(r"^(overrun|dropped events):\s*(\d+)", re.M)
_TRACEPOINT = re.compile(r"[A-Za-z0-9_][\w-]*", re.ASCII)  # a tracepoint's group or event: no '/', no '..'
# This process's instances that exclude its threads (a tail and aggregations may run at once, each with
# a reader thread of its own): a thread started for one is excluded by all of them.
_ours: weakref.WeakSet = weakref.WeakSet()
_ours_lock = threading.Lock()


def our_threads() -> list[int]:
    """Every thread of this process now."""
    return sorted(int(tid) for tid in os.listdir("/proc/self/task"))


def resolve_events(events: Events, patterns: list[str]) -> list[tuple[str, str]]:
    """``(group, event)`` for each ``group/event``, ``group:event`` or ``event`` glob, any owner.

    Dynamic events are matched by glob; an exact ``group/event`` also names a tracepoint (never a
    whole subsystem: ``sched/`` would be mostly our own threads' scheduling). No pattern: every
    dynamic event.
    """
    known = [(e.group, e.event) for e in events.list()]
    if not patterns:
        if not known:
            raise UserError("there are no probe events to tail",
                            "create one first: kprobe-tui probe ... (or perf probe, or uprobe_events)")
        return known
    chosen: list[tuple[str, str]] = []
    for pattern in patterns:
        group_glob, sep, event_glob = pattern.replace(":", "/", 1).rpartition("/")
        if not event_glob or (sep and not group_glob):
            problem = ("names neither a group nor an event" if not (group_glob or event_glob) else
                       f"names group {group_glob!r} but no event" if group_glob else "has no group before the '/'")
            raise UserError(f"{pattern!r} {problem}",
                            "name events: GROUP/EVENT, GROUP/* or EVENT (globs), or one tracepoint as GROUP/EVENT")
        hits = [(g, e) for g, e in known
                if fnmatch.fnmatchcase(e, event_glob) and (not sep or fnmatch.fnmatchcase(g, group_glob))]
        if not hits and sep and _TRACEPOINT.fullmatch(group_glob) and _TRACEPOINT.fullmatch(event_glob) \
                and events.tracefs.exists(f"events/{group_glob}/{event_glob}/enable"):
            hits = [(group_glob, event_glob)]
        if not hits:
            raise UserError(f"no probe event matches {pattern!r}",
                            "list them with: kprobe-tui list (or cat /sys/kernel/tracing/dynamic_events)")
        chosen += [hit for hit in hits if hit not in chosen]
    return chosen


class Instance:
    """``instances/<name>`` under a tracefs root; ``create()`` then ``remove()`` (or let undo do it)."""

    def __init__(self, top: Tracefs, name: str | None = None) -> None:
        self.top = top
        self.name = name or lifetime.run_name()
        self.tracefs = Tracefs(top.path(f"instances/{self.name}"))
        self.events = Events(top)
        self.enabled: list[tuple[str, str]] = []
        self.filtered: set[tuple[str, str]] = set()
        self.base_filters: dict[tuple[str, str], str] = {}  # the probe's own filter and ours, always applied
        self.excluded_threads: list[int] = []
        self.expressions: dict[tuple[str, str], str] = {}  # the filter asked for per event, before ours
        self._undo_token: int | None = None

    @property
    def trace_pipe(self) -> str:
        return str(self.tracefs.path("trace_pipe"))

    def create(self, buffer_kb: int | None = None, options: dict[str, bool] | None = None) -> None:
        """Make the instance; ``options`` are ``options/<name>`` switches such as record-tgid."""
        directory = self.tracefs.root
        if not self.top.writable:
            raise UserError("cannot tail a captured snapshot", "run on the live machine, without --snapshot/--tracefs")
        try:
            os.mkdir(directory)
        except OSError as exc:
            hint = ("another tail of this process is running" if exc.errno == errno.EEXIST
                    else "run as root; the kernel needs tracefs instances (CONFIG_TRACING)")
            raise UserError(f"cannot create trace instance {directory}: {exc.strerror}", hint) from exc
        self._undo_token = lifetime.undo.push(f"trace instance {self.name}", self._remove_now)
        # Wake readers as soon as there is data (the default, 50 %, holds events back until half full).
        if self.tracefs.exists("buffer_percent"):
            self.tracefs.write("buffer_percent", "0", append=False)
        if buffer_kb:
            self.tracefs.write("buffer_size_kb", str(buffer_kb), append=False)
        for option, on in (options or {}).items():
            self.set_option(option, on)

    def set_option(self, option: str, on: bool) -> None:
        if not self.tracefs.exists(f"options/{option}"):
            raise UserError(f"this kernel has no trace option {option!r}")
        self.tracefs.write(f"options/{option}", "1" if on else "0", append=False)

    def exclude_threads(self, tids: list[int]) -> None:
        """Never record events caused by these threads (ours: the golden rule of tracing).

        Call before ``enable``. Kernel filters see the thread id (``common_pid``), not the process,
        so each thread is named; the reader thread must be running already.
        """
        self.excluded_threads = sorted(set(tids))

    def exclude_our_threads(self) -> None:
        """Exclude every thread of this process here, before ``enable``, and in every other instance of
        ours already recording (their filters rewritten), so that two runs in one process never record
        each other's reader threads. Call once this run's threads are started: a thread started later
        is excluded when the next run of ours starts (a kernel ``event-fork`` pid list would follow
        every new thread, but also every process we start: the workloads we are asked to measure)."""
        tids = our_threads()
        with _ours_lock:
            self.exclude_threads(tids)
            for other in list(_ours):
                if other is not self:
                    other._exclude_instead(tids)
            _ours.add(self)

    def _exclude_instead(self, tids: list[int]) -> None:
        """Exclude ``tids`` (this process's threads now: gone ones are dropped) in the recording events' filters."""
        if tids == self.excluded_threads:
            return
        self.excluded_threads = list(tids)
        self.base_filters.clear()
        for group, event in self.enabled:
            try:
                self.set_filter(group, event, self.expressions.get((group, event), ""))
            except (OSError, UserError):  # deleted by someone else meanwhile: its reader says so
                continue

    def base_filter(self, group: str, event: str) -> str:
        """The filter always applied to ``group/event`` here: the one it was defined with, and ours.

        An instance has its own event filters, so the top-level one (the feedback guard's
        ``common_pid != <pid>``, the user's filter) is copied in, with our threads excluded.
        """
        if (group, event) not in self.base_filters:
            defined = self.top.read(f"events/{group}/{event}/filter").strip() if self.event_exists(group, event) else ""
            defined = "" if defined == "none" else defined
            parts = [f"common_pid != {tid}" for tid in self.excluded_threads if f"common_pid != {tid}" not in defined]
            if defined:
                parts.insert(0, f"({defined})" if parts else defined)
            self.base_filters[(group, event)] = " && ".join(parts)
        return self.base_filters[(group, event)]

    def enable(self, group: str, event: str) -> None:
        """Record ``group/event`` into this instance only, filtered before the first event."""
        if (group, event) not in self.filtered and self.base_filter(group, event):
            self.set_filter(group, event, "")
        self.events.enable(group, event, where=self.tracefs)
        if (group, event) not in self.enabled:
            self.enabled.append((group, event))

    def disable(self, group: str, event: str) -> None:
        """Stop recording ``group/event`` here (its filter stays, for when it is enabled again)."""
        self.events.disable(group, event, where=self.tracefs)
        if (group, event) in self.enabled:
            self.enabled.remove((group, event))

    def set_filter(self, group: str, event: str, expression: str) -> None:
        """Kernel-side filter of ``group/event`` inside this instance, on top of its base filter
        (KernelRefused with caret on error)."""
        self.expressions[(group, event)] = expression
        base = self.base_filter(group, event)
        if base and expression:
            expression = f"{base} && ({expression})"
        self.events.set_filter(group, event, expression or base, where=self.tracefs)
        self.filtered.add((group, event))

    def clear_filter(self, group: str, event: str) -> None:
        """Back to the base filter (or none)."""
        if self.base_filter(group, event):
            self.set_filter(group, event, "")
        elif (group, event) in self.filtered:
            self.events.clear_filter(group, event, where=self.tracefs)
            self.filtered.discard((group, event))
            self.expressions.pop((group, event), None)

    def event_format(self, group: str, event: str) -> str:
        return self.top.read(f"events/{group}/{event}/format")

    def event_exists(self, group: str, event: str) -> bool:
        return self.top.exists(f"events/{group}/{event}")

    def lost(self) -> dict[int, int]:
        """Events lost per CPU so far: ring overruns plus events dropped for lack of room."""
        lost: dict[int, int] = {}
        per_cpu = self.tracefs.path("per_cpu")
        for entry in os.listdir(per_cpu) if per_cpu.is_dir() else []:
            if entry.startswith("cpu") and entry[3:].isdigit():
                try:
                    text = (per_cpu / entry / "stats").read_text()
                except OSError:
                    continue
                lost[int(entry[3:])] = sum(int(m[2]) for m in _STATS_FIELD.finditer(text))
        return lost

    def remove(self) -> None:
        """Disable our events, then remove the directory (and forget the undo entry)."""
        if self._undo_token is not None:
            lifetime.undo.run(self._undo_token)
            self._undo_token = None

    def _remove_now(self) -> None:
        with _ours_lock:
            _ours.discard(self)
        for group, event in self.enabled:
            if not self.tracefs.exists(f"events/{group}/{event}/enable"):
                continue  # deleted by someone else meanwhile
            if (group, event) in self.filtered:
                self.tracefs.write(f"events/{group}/{event}/filter", "0", append=False)
            self.tracefs.write(f"events/{group}/{event}/enable", "0", append=False)
        self.enabled, self.filtered = [], set()
        try:
            os.rmdir(self.tracefs.root)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise UserError(f"cannot remove trace instance {self.tracefs.root}: {exc.strerror}",
                            "something still reads its trace_pipe; it is removed as stale by: kprobe-tui cleanup") from exc
