"""The function_graph tracer's text, read back into call trees, and the trees summed per call path.

The tracer prints one line per entry (``name() {``), per return (``} /* name */``) and per leaf
call (``name();``), with the CPU, the task and its pid (funcgraph-proc) and the duration of each
finished call. A call starts and ends on one thread but a thread may move between CPUs, so calls
are nested per pid, never per CPU. What the kernel lost shows as a return with no entry open (the
call is dropped, counted in ``unmatched``) or an entry never closed (``open_calls`` at the end).

Return values come as comments, a return probe's event on the thread that returned (kernel/graphreturns.py):
printed after the call's ``}`` (the probe's return hook ran last, 6.1 and 6.12 alike) or before it; a comment
is given to the call of its function that the thread's previous line closed, else to the one still open on top.
An outermost call is handed out once its thread's next line shows its value is not coming.
"""

from __future__ import annotations

import errno
import os
import re
import select
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

from kprobe_tui.kernel.callees import kernel_callees
from kprobe_tui.kernel.funcgraph import GraphSettings, GraphTracer
from kprobe_tui.kernel.graphreturns import MAX_RETURN_PROBES, RETURN_FIELD, ReturnProbes, graphed_name
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
# "/* r3_do_filp_open: (do_sys_openat2+0x7d/0x120 <- do_filp_open) ret=0xfffffffffffffffe */"
_RETURN = re.compile(r"/\* (?P<event>[A-Za-z0-9_]{1,63}): \(.*\) " + RETURN_FIELD + r"=0x(?P<value>[0-9a-f]{1,16}) \*/$")
_LOST = re.compile(r"CPU:\d+ \[LOST (?P<count>\d+) EVENTS\]")  # the ring overflowed: the reader was too slow
READ_SIZE = 1 << 16
UNLIMITED_DEPTH_CALLEES = 3  # levels of callees given return probes before the calls, where the depth is unlimited
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
    retval: int | None = None  # as the register held it (unsigned); with return values asked for

    @property
    def error(self) -> int | None:
        return None if self.retval is None else error_of(self.retval)


MAX_ERRNO = 4095  # the kernel's IS_ERR_VALUE: -4095..-1 is an error code


def error_of(retval: int) -> int | None:
    """The negative error code a return value is, by the rule funcgraph-retval prints it with: an ``int``
    (bit 31 set, nothing above) is sign-extended first; None when it is no error."""
    value = retval - (1 << 32) if retval >> 31 == 1 else retval - (1 << 64) if retval >> 63 else retval
    return value if -MAX_ERRNO <= value < 0 else None


def error_name(code: int) -> str:
    """``-2 ENOENT``; a kernel-only code (ERESTARTSYS, 512) by its number alone."""
    name = errno.errorcode.get(-code)
    return f"{code} {name}" if name else str(code)


def first_failure(call: Call) -> Call | None:
    """The call in ``call``'s tree that returned an error first, in time (children return before their
    caller): where the error came from, retsnoop's question. None when none failed (or none is known)."""
    for child in call.children:
        found = first_failure(child)
        if found is not None:
            return found
    return call if call.error is not None else None


@dataclass
class GraphReader:
    """Feed it lines; it returns each outermost call as soon as that call returns (with return values
    asked for, once its value came or cannot come any more: ``flush()`` hands out the rest at the end)."""

    orphans: int = 0  # lines of calls begun before we started, or whose entry the kernel lost
    lost: int = 0  # entries and returns the kernel dropped, as it says in the text
    stacks: dict[int, list[Call]] = field(default_factory=dict)  # per pid, the calls not yet returned
    returns: dict[str, str] | None = None  # the return probes' events and their functions; None: not asked for
    _closed: dict[int, Call] = field(default_factory=dict)  # per pid, the call its previous line closed
    _held: dict[int, Call] = field(default_factory=dict)  # per pid, an outermost call whose value may still come
    _done: list[Call] = field(default_factory=list)

    def feed(self, lines: Iterable[str]) -> list[Call]:
        for line in lines:
            self._line(line)
        done, self._done = self._done, []
        return done

    def flush(self) -> list[Call]:
        """The outermost calls still waiting for a return value, as they are."""
        held, self._held = list(self._held.values()), {}
        return held

    @property
    def open_calls(self) -> int:
        return sum(len(stack) for stack in self.stacks.values())

    def _line(self, line: str) -> None:
        match = _LINE.match(line)
        if match is None:
            if lost := _LOST.search(line):
                self.lost += int(lost["count"])
            return  # headers, "------" and "=>" task switches, "####" buffer notes
        text = match["body"]
        body = text.strip()
        depth = (len(text) - len(text.lstrip(" ")) - 1) // 2  # the tracer indents two spaces a level
        task, cpu = (match["task"] or "").strip(), int(match["cpu"])
        pid = int(match["pid"]) if match["pid"] else -1 - cpu
        stack = self.stacks.setdefault(pid, [])
        if self.returns is not None and (returned := _RETURN.match(body)) is not None:
            self._return(pid, stack, returned)
            return
        found = _ENTRY.match(body) or _LEAF.match(body)
        exit_ = None if found else _EXIT.match(body)
        if not (found or exit_):
            return  # a comment: a trace event or trace_printk between the calls
        if (held := self._held.pop(pid, None)) is not None:  # its thread went on: its value is not coming
            self._done.append(held)
        self._closed.pop(pid, None)
        ns = round(float(match["usecs"]) * 1000) if match["usecs"] else None
        if found:
            entry = found.re is _ENTRY
            if depth != len(stack):  # an entry above it is missing: nothing here can be placed
                self.orphans += 1
                if depth == 0:
                    stack.clear()
                else:
                    return
            call = Call(found["name"], pid, task, cpu, None if entry else ns)
            if stack:
                stack[-1].children.append(call)
            if entry:
                stack.append(call)
            else:
                self._closing(pid, stack, call)
            return
        assert exit_ is not None
        if not stack or depth != len(stack) - 1 or (exit_["name"] and exit_["name"] != stack[-1].name):
            self.orphans += 1
            return
        call = stack.pop()
        call.ns = ns
        self._closing(pid, stack, call)

    def _closing(self, pid: int, stack: list[Call], call: Call) -> None:
        """``call`` returned: handed out if outermost (or held for its value), remembered for a value after it."""
        if self.returns is None:
            if not stack:
                self._done.append(call)
            return
        self._closed[pid] = call
        if not stack:
            if call.retval is None:
                self._held[pid] = call
            else:
                self._done.append(call)

    def _return(self, pid: int, stack: list[Call], returned: re.Match) -> None:
        """A return probe's value: to the call its thread just closed, else to the open one on top."""
        assert self.returns is not None
        function = self.returns.get(returned["event"])
        closed = self._closed.get(pid)
        if closed is not None and closed.retval is None and graphed_name(closed.name) == function:
            closed.retval = int(returned["value"], 16)
            if self._held.get(pid) is closed:
                self._done.append(self._held.pop(pid))
        elif stack and stack[-1].retval is None and graphed_name(stack[-1].name) == function:
            stack[-1].retval = int(returned["value"], 16)
        # else: a call of that function outside the graph (another thread's, or ours before a depth cut)


@dataclass
class PathTotals:
    """One call path (outermost function first) summed over every call that took it."""

    path: tuple[str, ...]
    calls: int = 0
    total_ns: int = 0
    self_ns: int = 0  # total minus the callees' time
    errors: Counter[int] = field(default_factory=Counter)  # the calls that returned an error code, by code
    first_errors: int = 0  # the calls where the first error of an outermost call came from (first_failure)

    @property
    def failed(self) -> int:
        return sum(self.errors.values())


def summarize(calls: Iterable[Call]) -> list[PathTotals]:
    """Totals per call path, in tree order (each path right after its parent, callees in first-seen order)."""
    totals: dict[tuple[str, ...], PathTotals] = {}

    def add(call: Call, parent: tuple[str, ...], origin: Call | None) -> None:
        path = parent + (call.name,)
        entry = totals.setdefault(path, PathTotals(path))
        entry.calls += 1
        ns = call.ns or 0
        entry.total_ns += ns
        entry.self_ns += ns - sum(child.ns or 0 for child in call.children)
        if call.error is not None:
            entry.errors[call.error] += 1
            entry.first_errors += call is origin
        for child in call.children:
            add(child, path, origin)

    for call in calls:
        add(call, (), first_failure(call))
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


def _flush(graph: GraphReader, calls: list[Call], max_calls: int, on_call: Callable[[Call], object] | None) -> None:
    """The calls the reader still held for their return values, within the bound."""
    for call in graph.flush()[:max(max_calls - len(calls), 0)]:
        calls.append(call)
        if on_call is not None:
            on_call(call)


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
    returns: ReturnsReport | None = None  # with return values asked for

    @property
    def paths(self) -> list[PathTotals]:
        return summarize(self.calls)


@dataclass
class ReturnsReport:
    """Which functions' return values a run could show."""

    probed: list[str]
    void: list[str]  # they return nothing (BTF): no probe
    refused: list[str]  # the kernel would not probe them
    past_cap: int  # seen after the cap of return probes was reached


def callee_names(call: Call) -> list[str]:
    """Every function in ``call``'s tree, shallowest first: the return probes are made in this order."""
    names, level = [call.name], call.children
    while level:
        names += [child.name for child in level]
        level = [grandchild for child in level for grandchild in child.children]
    return names


def graph_calls(top: Tracefs, settings: GraphSettings, *, seconds: float | None, max_calls: int,
                done: Callable[[], bool], started: Callable[[], object] = lambda: None,
                on_call: Callable[[Call], object] | None = None, retvals: bool = False) -> GraphAnswer:
    """Borrow the tracer, collect calls until a bound (Ctrl-C included), give it back: the CLI's and the TUI's run.
    ``started`` runs once the tracer records (the CLI releases its command there). ``retvals``: return probes on
    the function and, once a call shows them, its callees (kernel/graphreturns.py), removed at the end."""
    tracer = GraphTracer(top, settings)
    graph, calls = GraphReader(), list[Call]()
    probes = ReturnProbes(top, settings.pids, our_threads()) if retvals else None
    seen = on_call
    if probes is not None:
        graph.returns = probes.functions

        def seen(call: Call) -> None:
            probes.add(callee_names(call))
            if on_call is not None:
                on_call(call)
    ended: Ended
    try:
        # The code is read before the tracer starts (seconds in a guest: its buffer would fill meanwhile), the
        # probes made once it has (a busy tracer's owner sees none of our events) and before the command runs
        # (its calls may all be over before the first is read).
        callees = [] if probes is None else kernel_callees(
            settings.function, settings.depth - 1 if settings.depth else UNLIMITED_DEPTH_CALLEES, MAX_RETURN_PROBES)
        tracer.start(our_threads())
        assert tracer.pipe is not None, "a started tracer has its pipe open"
        if probes is not None:
            probes.add([settings.function, *callees])
        started()
        deadline = time.monotonic() + seconds if seconds else None
        try:
            ended = collect(tracer.pipe, graph, calls, max_calls=max_calls, deadline=deadline, done=done, on_call=seen)
        except KeyboardInterrupt:
            ended = "interrupted"
        _flush(graph, calls, max_calls, on_call)
    finally:
        if probes is not None:
            probes.remove()
        tracer.stop()
    report = None if probes is None else ReturnsReport(list(probes.functions.values()), probes.void, probes.refused,
                                                       probes.past_cap)
    return GraphAnswer(calls, ended, graph.orphans, graph.open_calls, graph.lost, report)
