"""The function_graph tracer's text, read back into call trees, and the trees summed per call path.

The tracer prints one line per entry (``name() {``), per return (``} /* name */``) and per leaf
call (``name();``), with the CPU, the task and its pid (funcgraph-proc) and the duration of each
finished call. A call starts and ends on one thread but a thread may move between CPUs, so calls
are nested per pid, never per CPU. What the kernel lost shows as a return with no entry open (the
call is dropped, counted in ``unmatched``) or an entry never closed (``open_calls`` at the end).
"""

from __future__ import annotations

import os
import re
import select
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

from kprobe_tui.kernel.funcgraph import GraphSettings, GraphTracer
from kprobe_tui.kernel.instance import our_threads
from kprobe_tui.kernel.tracefs import Tracefs

Ended = Literal["deadline", "max-calls", "done", "interrupted"]

# " 0)     dd-167     | + 82.965 us   |      netfs_file_read_iter [netfs]();"
# The task is at most 15 characters (TASK_COMM_LEN - 1) and may hold anything, dashes and bars
# included, so it is matched lazily up to the first "-PID |" that the layout allows. Without
# funcgraph-proc (perf ftrace's default) there is no task: calls are nested per CPU then.
_LINE = re.compile(r"\s*(?P<cpu>\d+)\)\s+(?:(?P<task>.{0,16}?)-(?P<pid>\d+)\s+\|)?\s*[+!#*@$]?\s*"
                   r"(?:(?P<usecs>\d+\.\d+) us)?\s*\|\s(?P<body>.*)")
_ENTRY = re.compile(r"(?P<name>[^\s(){};]+(?: \[[^\]\s]+\])?)\(\) \{$")
_LEAF = re.compile(r"(?P<name>[^\s(){};]+(?: \[[^\]\s]+\])?)\(\);$")
_EXIT = re.compile(r"\}(?: /\* (?P<name>[^*]+?) \*/)?$")
_LOST = re.compile(r"CPU:\d+ \[LOST (?P<count>\d+) EVENTS\]")  # the ring overflowed: the reader was too slow
READ_SIZE = 1 << 16
POLL_MS = 100  # how soon a stop asked for (done(), a deadline) is seen when nothing is traced


@dataclass
class Call:
    """One call of a function and the calls it made; ``ns`` once it has returned."""

    name: str
    pid: int
    task: str
    cpu: int
    ns: int | None = None
    children: list[Call] = field(default_factory=list)


@dataclass
class GraphReader:
    """Feed it lines; it returns each outermost call as soon as that call returns."""

    orphans: int = 0  # lines of calls begun before we started, or whose entry the kernel lost
    lost: int = 0  # entries and returns the kernel dropped, as it says in the text
    stacks: dict[int, list[Call]] = field(default_factory=dict)  # per pid, the calls not yet returned

    def feed(self, lines: Iterable[str]) -> list[Call]:
        finished = []
        for line in lines:
            done = self._line(line)
            if done is not None:
                finished.append(done)
        return finished

    @property
    def open_calls(self) -> int:
        return sum(len(stack) for stack in self.stacks.values())

    def _line(self, line: str) -> Call | None:
        match = _LINE.match(line)
        if match is None:
            if lost := _LOST.search(line):
                self.lost += int(lost["count"])
            return None  # headers, "------" and "=>" task switches, "####" buffer notes
        text = match["body"]
        body = text.strip()
        depth = (len(text) - len(text.lstrip(" ")) - 1) // 2  # the tracer indents two spaces a level
        task, cpu = (match["task"] or "").strip(), int(match["cpu"])
        pid = int(match["pid"]) if match["pid"] else -1 - cpu
        stack = self.stacks.setdefault(pid, [])
        ns = round(float(match["usecs"]) * 1000) if match["usecs"] else None
        found = _ENTRY.match(body) or _LEAF.match(body)
        if found:
            entry = found.re is _ENTRY
            if depth != len(stack):  # an entry above it is missing: nothing here can be placed
                self.orphans += 1
                if depth == 0:
                    stack.clear()
                else:
                    return None
            call = Call(found["name"], pid, task, cpu, None if entry else ns)
            if stack:
                stack[-1].children.append(call)
            if entry:
                stack.append(call)
                return None
            return None if stack else call
        if (exit_ := _EXIT.match(body)) is not None:
            if not stack or depth != len(stack) - 1 or (exit_["name"] and exit_["name"] != stack[-1].name):
                self.orphans += 1
                return None
            call = stack.pop()
            call.ns = ns
            return None if stack else call
        return None  # a comment: a trace event or trace_printk between the calls


@dataclass
class PathTotals:
    """One call path (outermost function first) summed over every call that took it."""

    path: tuple[str, ...]
    calls: int = 0
    total_ns: int = 0
    self_ns: int = 0  # total minus the callees' time


def summarize(calls: Iterable[Call]) -> list[PathTotals]:
    """Totals per call path, in tree order (each path right after its parent, callees in first-seen order)."""
    totals: dict[tuple[str, ...], PathTotals] = {}

    def add(call: Call, parent: tuple[str, ...]) -> None:
        path = parent + (call.name,)
        entry = totals.setdefault(path, PathTotals(path))
        entry.calls += 1
        ns = call.ns or 0
        entry.total_ns += ns
        entry.self_ns += ns - sum(child.ns or 0 for child in call.children)
        for child in call.children:
            add(child, path)

    for call in calls:
        add(call, ())
    below: dict[tuple[str, ...], list[tuple[str, ...]]] = {}
    for path in totals:  # first-seen order, parents before their callees
        below.setdefault(path[:-1], []).append(path)
    ordered: list[PathTotals] = []

    def walk(parent: tuple[str, ...]) -> None:
        for path in below.get(parent, []):
            ordered.append(totals[path])
            walk(path)

    walk(())
    return ordered


def collect(pipe: int, graph: GraphReader, calls: list[Call], *, max_calls: int, deadline: float | None,
            done: Callable[[], bool], on_call: Callable[[Call], object] | None = None) -> Ended:
    """Read the tracer's non-blocking pipe into ``calls`` until ``deadline`` (monotonic), ``max_calls``, or
    ``done()`` (then one more read: what happened last is still in the buffer); which of them ended it."""
    poller = select.poll()
    poller.register(pipe, select.POLLIN)
    partial = b""
    finishing = False
    while True:
        if deadline is not None and time.monotonic() >= deadline:
            return "deadline"
        poller.poll(POLL_MS)
        try:
            data = os.read(pipe, READ_SIZE)
        except BlockingIOError:
            data = b""
        if data:
            lines = (partial + data).split(b"\n")
            partial = lines.pop()
            for call in graph.feed(line.decode(errors="replace") for line in lines):
                calls.append(call)
                if on_call is not None:
                    on_call(call)
                if len(calls) >= max_calls:
                    return "max-calls"
        elif finishing:
            return "done"
        finishing = finishing or done()


def thread_names(calls: Iterable[Call]) -> list[str]:
    """``dd-119`` for each thread (``cpu1`` where the tracer did not say); a call printed as ``<...>`` (its
    name not yet saved by the kernel) takes the name its thread's other calls had."""
    names: dict[int, str] = {}
    for call in calls:
        if call.task != "<...>" or call.pid not in names:
            names[call.pid] = call.task
    return sorted(f"{name}-{pid}" if pid >= 0 else f"cpu{-1 - pid}" for pid, name in names.items())


@dataclass
class GraphAnswer:
    """One graph run: the calls of the function, their paths summed, and what was left out."""

    calls: list[Call]
    ended: Ended
    orphans: int
    open_calls: int
    lost: int

    @property
    def paths(self) -> list[PathTotals]:
        return summarize(self.calls)


def graph_calls(top: Tracefs, settings: GraphSettings, *, seconds: float | None, max_calls: int,
                done: Callable[[], bool], started: Callable[[], object] = lambda: None,
                on_call: Callable[[Call], object] | None = None) -> GraphAnswer:
    """Borrow the tracer, collect calls until a bound (Ctrl-C included), give it back: the CLI's and the TUI's run.
    ``started`` runs once the tracer records (the CLI releases its command there)."""
    tracer = GraphTracer(top, settings)
    graph, calls = GraphReader(), list[Call]()
    ended: Ended
    try:
        tracer.start(our_threads())
        assert tracer.pipe is not None, "a started tracer has its pipe open"
        started()
        deadline = time.monotonic() + seconds if seconds else None
        try:
            ended = collect(tracer.pipe, graph, calls, max_calls=max_calls, deadline=deadline, done=done,
                            on_call=on_call)
        except KeyboardInterrupt:
            ended = "interrupted"
    finally:
        tracer.stop()
    return GraphAnswer(calls, ended, graph.orphans, graph.open_calls, graph.lost)
