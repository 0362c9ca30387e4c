"""``kprobe-tui graph FUNC``: what a kernel function calls, and where its time goes, like ``perf ftrace -G``.

The kernel's function_graph tracer, limited to FUNC's calls (set_graph_function) and to --depth
levels below it, records every call FUNC makes with its duration. At the end, each call path is
summed: calls, total and self time (the time not spent in a callee), as uftrace's graph view
does; --each prints every call of FUNC as it returns, as perf ftrace prints it.

--retval adds the return values: which calls returned an error code, and in each call of FUNC
that failed, the call the first error came from (retsnoop's question: where did this error come
from). The kernel's tracer gives them only with funcgraph-retval (6.5+, and not in every build):
kprobe-tui puts a return probe on FUNC and, before the calls, on the functions its machine code
calls down to --depth (up to 64; none on a function that returns nothing); a function called through
a pointer gets one once a call has shown it, its values from the next call on.

Bounded by default: --max-calls calls of FUNC (1000), --depth levels (4), and with neither a
command nor --pid, a --duration (10 s). The tracer is the kernel's only one (see
kernel/funcgraph.py): it is borrowed only when idle and given back as it was, after a SIGKILL
by ``kprobe-tui cleanup``.

  kprobe-tui graph vfs_read -- dd if=/dev/zero of=/dev/null bs=1 count=100
  kprobe-tui graph tcp_sendmsg --pid 1234 --depth 3 --each
  kprobe-tui graph do_sys_openat2 --retval --each -- cat /nonexistent
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from kprobe_tui.commands.seconds import check_seconds
from kprobe_tui.errors import UserError
from kprobe_tui.kernel import lifetime, sources
from kprobe_tui.kernel.funcgraph import FUNCTION_NAME, GraphSettings
from kprobe_tui.kernel.graphreturns import MAX_RETURN_PROBES
from kprobe_tui.stream.callgraph import (
    Call,
    GraphAnswer,
    PathTotals,
    ReturnsReport,
    error_name,
    first_failure,
    graph_calls,
    thread_names,
)
from kprobe_tui.textsafe import printable

DEFAULT_DEPTH = 4
DEFAULT_MAX_CALLS = 1000
DEFAULT_SECONDS = 10.0


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
    parser.add_argument("--retval", action="store_true",
                        help="the calls' return values: errors counted, the first error of a failing call marked")
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
    settings = GraphSettings(args.function, args.depth, pids, args.irqs)

    def begin() -> None:  # the tracer records: said once it does, then the command runs from its first instruction
        _err(f"Graphing {args.function}" + (f" in pid {', '.join(map(str, pids))}" if pids else "")
             + "... Hit Ctrl-C to end.")
        if go is not None:
            os.write(go, b"x")

    try:
        answer = graph_calls(top, settings, seconds=duration, max_calls=args.max_calls,
                             done=(lambda: _exited(child)) if child else (lambda: False), started=begin,
                             on_call=_print_call if args.each else None, retvals=args.retval)
    finally:
        if go is not None:
            os.close(go)
        if child is not None:
            _reap(child)
    stopped = {"deadline": f"after {duration or 0:g} s", "max-calls": f"--max-calls {args.max_calls} reached",
               "done": "the command exited", "interrupted": "interrupted"}[answer.ended]
    _report(args, answer, stopped)
    return 0


def _check(args, command: list[str]) -> None:
    if not FUNCTION_NAME.fullmatch(args.function):
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


def _exited(child: int) -> bool:
    return os.waitpid(child, os.WNOHANG)[0] != 0


def _reap(child: int) -> None:
    try:
        os.waitpid(child, 0)
    except ChildProcessError:
        pass


def _print_call(call: Call) -> None:
    _print_tree(call, 0, first_failure(call))


def _print_tree(call: Call, depth: int, origin: Call | None) -> None:
    duration = f"{call.ns / 1000:10.3f} us" if call.ns is not None else " " * 13
    task = f"  {printable(call.task)}-{call.pid}" if depth == 0 else ""
    sys.stdout.write(f"{duration}  {'  ' * depth}{printable(call.name)}{_returned(call, origin)}{task}\n")
    for child in call.children:
        _print_tree(child, depth + 1, origin)


def _returned(call: Call, origin: Call | None) -> str:
    """`` = -2 ENOENT  <- first error`` where the value is known."""
    if call.retval is None:
        return ""
    error = call.error
    shown = error_name(error) if error is not None else f"{call.retval:#x}"
    return f" = {shown}" + ("  <- first error" if call is origin else "")


def _report(args, answer: GraphAnswer, stopped: str) -> None:
    calls, totals = answer.calls, answer.paths
    tasks = thread_names(calls)
    if args.json:
        json.dump({"function": args.function, "calls": len(calls), "stopped": stopped, "orphans": answer.orphans,
                   "lost": answer.lost,
                   "unfinished": answer.open_calls, "threads": tasks,
                   "paths": [{"path": list(p.path), "calls": p.calls, "total_ns": p.total_ns, "self_ns": p.self_ns}
                             | (_errors_json(p) if answer.returns else {}) for p in totals]}
                  | ({"return_values": vars(answer.returns)} if answer.returns else {}), sys.stdout)
        sys.stdout.write("\n")
        return
    threads = f"{len(tasks)} thread{'s' if len(tasks) != 1 else ''}" + (f" ({', '.join(tasks[:3])}"
                                                                         f"{', ...' if len(tasks) > 3 else ''})" if tasks else "")
    more = "; more calls came: a larger --max-calls (or -d SECONDS) shows them" if answer.ended == "max-calls" else ""
    print(f"# {args.function}: {len(calls)} call{'s' if len(calls) != 1 else ''} on {threads}; stopped {stopped}{more}")
    if answer.lost:
        print(f"# the kernel lost {answer.lost} entries and returns (its ring filled faster than it was read): "
              "the calls they belonged to are left out; a lower --depth loses fewer")
    if answer.orphans or answer.open_calls:
        print(f"# left out: {answer.orphans} lines of calls begun before the start (or whose entry was lost), "
              f"{answer.open_calls} calls still open at the end")
    if answer.returns:
        _report_returns(answer.returns)
    print(f"{'calls':>8} {'total us':>12} {'self us':>12}" + (f" {'failed':>6}" if answer.returns else "")
          + "  call path")
    for entry in totals:
        print(_row(entry, bool(answer.returns)))


def _report_returns(returns: ReturnsReport) -> None:
    refused = f"; the kernel would not probe {len(returns.refused)}: {printable(', '.join(returns.refused[:5]))}" \
        f"{', ...' if len(returns.refused) > 5 else ''}" if returns.refused else ""
    capped = f"; {returns.past_cap} more left without (at most {MAX_RETURN_PROBES})" if returns.past_cap else ""
    void = f"; {len(returns.void)} return nothing" if returns.void else ""
    print(f"# return values of {len(returns.probed)} functions{void}{refused}{capped}")


def _row(entry: PathTotals, returns: bool) -> str:
    row = f"{entry.calls:>8} {entry.total_ns / 1000:>12.3f} {entry.self_ns / 1000:>12.3f}"
    if returns:
        row += f" {entry.failed:>6}"
    row += f"  {'  ' * (len(entry.path) - 1)}{printable(entry.path[-1])}"
    if entry.errors:
        row += "  = " + ", ".join(f"{error_name(code)} x{count}" for code, count in entry.errors.most_common(3))
    if entry.first_errors:
        row += f"  <- first error of {entry.first_errors} call{'s' if entry.first_errors != 1 else ''}"
    return row


def _errors_json(entry: PathTotals) -> dict:
    return {"errors": {str(code): count for code, count in entry.errors.most_common()},
            "first_errors": entry.first_errors}


def _err(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()
