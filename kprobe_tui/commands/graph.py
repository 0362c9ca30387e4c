"""``kprobe-tui graph FUNC``: what a kernel function calls, and where its time goes, like ``perf ftrace -G``.

The kernel's function_graph tracer, limited to FUNC's calls (set_graph_function) and to --depth
levels below it, records every call FUNC makes with its duration. At the end, each call path is
summed: calls, total and self time (the time not spent in a callee), as uftrace's graph view
does; --each prints every call of FUNC as it returns, as perf ftrace prints it.

Bounded by default: --max-calls calls of FUNC (1000), --depth levels (4), and with neither a
command nor --pid, a --duration (10 s). The tracer is the kernel's only one (see
kernel/funcgraph.py): it is borrowed only when idle and given back as it was, after a SIGKILL
by ``kprobe-tui cleanup``.

  kprobe-tui graph vfs_read -- dd if=/dev/zero of=/dev/null bs=1 count=100
  kprobe-tui graph tcp_sendmsg --pid 1234 --depth 3 --each
"""

from __future__ import annotations

import argparse
import json
import os
import re
import select
import sys
import time

from kprobe_tui.commands.seconds import check_seconds
from kprobe_tui.errors import UserError
from kprobe_tui.kernel import lifetime, sources
from kprobe_tui.kernel.funcgraph import GraphSettings, GraphTracer
from kprobe_tui.kernel.instance import our_threads
from kprobe_tui.stream.callgraph import Call, GraphReader, PathTotals, summarize
from kprobe_tui.textsafe import printable

DEFAULT_DEPTH = 4
DEFAULT_MAX_CALLS = 1000
DEFAULT_SECONDS = 10.0
READ_SIZE = 1 << 16
# A kernel function's name as set_graph_function takes it (no glob: one function's graph).
_FUNCTION = re.compile(r"[A-Za-z_][A-Za-z0-9_.]{0,127}")


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("graph", usage="kprobe-tui graph [options] FUNC [-- COMMAND ...]",
                                   help="the calls a kernel function makes, with their times (function_graph)",
                                   description=__doc__.split("\n\n", 1)[1],
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("function", metavar="FUNC", help="a kernel function (as in available_filter_functions)")
    parser.add_argument("-p", "--pid", type=int, action="append", default=[], metavar="TID",
                        help="graph only this thread's calls (repeatable)")
    parser.add_argument("--depth", type=int, default=DEFAULT_DEPTH, metavar="N",
                        help=f"levels below FUNC to show (default {DEFAULT_DEPTH}; 0: no limit)")
    parser.add_argument("--max-calls", type=int, default=DEFAULT_MAX_CALLS, metavar="N",
                        help=f"stop after N calls of FUNC (default {DEFAULT_MAX_CALLS})")
    parser.add_argument("-d", "--duration", type=float, metavar="SECONDS",
                        help=f"stop after SECONDS (default {DEFAULT_SECONDS:g} s without a command or --pid)")
    parser.add_argument("--irqs", action="store_true", help="show interrupt handlers that ran inside the calls")
    parser.add_argument("--each", action="store_true", help="print every call of FUNC as it returns")
    parser.add_argument("--json", action="store_true", help="the call paths as JSON")
    parser.set_defaults(run=run, program=[])


def run(args) -> int:
    check_seconds(args, "duration")
    command = args.program
    _check(args, command)
    top = sources.from_args(args).tracing()
    lifetime.run_name()  # the run's lock first: the tracer's record lives beside it
    duration = args.duration or (None if command or args.pid else DEFAULT_SECONDS)
    child, go = _spawn_waiting(command) if command else (None, None)
    pids = tuple(args.pid) + ((child,) if child else ())
    tracer = GraphTracer(top, GraphSettings(args.function, args.depth, pids, args.irqs))
    graph = GraphReader()
    calls: list[Call] = []
    try:
        tracer.start(our_threads())
        assert tracer.pipe is not None, "a started tracer has its pipe open"
        if go is not None:
            os.write(go, b"x")  # the command runs now, graphed from its first instruction
        try:
            _err(f"Graphing {args.function}" + (f" in pid {', '.join(map(str, pids))}" if pids else "")
                 + "... Hit Ctrl-C to end.")
            stopped = _drain(tracer.pipe, graph, calls, args, duration, child)
        except KeyboardInterrupt:
            stopped = "interrupted"
    finally:
        tracer.stop()
        if go is not None:
            os.close(go)
        if child is not None:
            _reap(child)
    _report(args, calls, graph, stopped)
    return 0


def _check(args, command: list[str]) -> None:
    if not _FUNCTION.fullmatch(args.function):
        raise UserError(f"{printable(args.function)!r} is not a kernel function's name",
                        "name one function, e.g. kprobe-tui graph vfs_read")
    if args.depth < 0 or args.max_calls < 1:
        raise UserError("--depth must be 0 or more and --max-calls 1 or more")
    if command and args.pid:
        raise UserError("give either a command or --pid, not both")
    if any(pid <= 0 for pid in args.pid):
        raise UserError("--pid takes a thread id above 0")


def _spawn_waiting(command: list[str]) -> tuple[int, int]:
    """Fork the command, held before exec until the tracer follows its pid (as perf ftrace does)."""
    ready, go = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child only waits and execs
        try:
            os.close(go)
            if os.read(ready, 1) == b"x":  # end of file instead: the tracer could not start, nor does the command
                os.execvp(command[0], command)
        except OSError as exc:
            os.write(2, f"kprobe-tui: graph: cannot run {printable(command[0])}: {exc.strerror}\n".encode())
        os._exit(127)
    os.close(ready)
    return child, go


def _reap(child: int) -> None:
    try:
        os.waitpid(child, 0)
    except ChildProcessError:
        pass


def _drain(fd: int, graph: GraphReader, calls: list[Call], args, duration: float | None, child: int | None) -> str:
    """Read trace_pipe until a bound is met; why it stopped, in words."""
    deadline = time.monotonic() + duration if duration else None
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    partial = b""
    exited = False
    while True:
        if deadline is not None and time.monotonic() >= deadline:
            return f"after {duration:g} s"
        poller.poll(100)
        data = _read(fd)
        if data:
            lines = (partial + data).split(b"\n")
            partial = lines.pop()
            for call in graph.feed(line.decode(errors="replace") for line in lines):
                calls.append(call)
                if args.each:
                    _print_call(call)
                if len(calls) >= args.max_calls:
                    return f"--max-calls {args.max_calls} reached"
        elif exited:
            return "the command exited"
        if child is not None and not exited and os.waitpid(child, os.WNOHANG)[0]:
            exited = True  # one more read: what it did last is still in the buffer


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, READ_SIZE)
    except BlockingIOError:
        return b""


def _print_call(call: Call, depth: int = 0) -> None:
    duration = f"{call.ns / 1000:10.3f} us" if call.ns is not None else " " * 13
    task = f"{printable(call.task)}-{call.pid}" if depth == 0 else ""
    sys.stdout.write(f"{duration}  {'  ' * depth}{call.name}{'  ' + task if task else ''}\n")
    for child in call.children:
        _print_call(child, depth + 1)


def _report(args, calls: list[Call], graph: GraphReader, stopped: str) -> None:
    totals = summarize(calls)
    tasks = _threads(calls)
    if args.json:
        json.dump({"function": args.function, "calls": len(calls), "stopped": stopped, "orphans": graph.orphans,
                   "unfinished": graph.open_calls, "threads": tasks,
                   "paths": [{"path": list(p.path), "calls": p.calls, "total_ns": p.total_ns, "self_ns": p.self_ns}
                             for p in totals]}, sys.stdout)
        sys.stdout.write("\n")
        return
    threads = f"{len(tasks)} thread{'s' if len(tasks) != 1 else ''}" + (f" ({', '.join(tasks[:3])}"
                                                                         f"{', ...' if len(tasks) > 3 else ''})" if tasks else "")
    print(f"# {args.function}: {len(calls)} call{'s' if len(calls) != 1 else ''} on {threads}; stopped {stopped}")
    if graph.orphans or graph.open_calls:
        print(f"# left out: {graph.orphans} lines of calls begun before the start (or whose entry was lost), "
              f"{graph.open_calls} calls still open at the end")
    print(f"{'calls':>8} {'total us':>12} {'self us':>12}  call path")
    for entry in totals:
        print(_row(entry))


def _threads(calls: list[Call]) -> list[str]:
    """``dd-119`` for each thread; a call the kernel printed as ``<...>`` (its name not yet saved) takes the
    name its thread's other calls had."""
    names: dict[int, str] = {}
    for call in calls:
        if call.task != "<...>" or call.pid not in names:
            names[call.pid] = call.task
    return sorted(f"{printable(name)}-{pid}" if pid >= 0 else f"cpu{-1 - pid}" for pid, name in names.items())


def _row(entry: PathTotals) -> str:
    return (f"{entry.calls:>8} {entry.total_ns / 1000:>12.3f} {entry.self_ns / 1000:>12.3f}  "
            f"{'  ' * (len(entry.path) - 1)}{entry.path[-1]}")


def _err(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()
