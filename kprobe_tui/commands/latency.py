"""``kprobe-tui latency FUNC``: how long a function takes, entry to return, like bcc's funclatency.

A log2 histogram with count, average, min and max, per comm or pid with --by. In the kernel, hist
triggers keep each thread's entry time and a synthetic event carries the latency to a table; in
user space, our trace instance's entry and return events are paired per thread.

Nested and recursive calls: a thread's entry time is kept once per thread and read once by its
return (hist variables behave so in the kernel; the user-space engine does the same). A nested
call's entry replaces the outer one's, so only the innermost call is timed, never a garbage span
across calls; the outer returns are counted as "unmatched" (bcc's funclatency and bpftrace's
@start[tid] leave them out too). Kernel return probes are kretprobes with 4096 slots, so threads
asleep in FUNC do not make returns go missing; misses the kernel counts are reported as "lost".

By stack (``--by stack``, ``--by stack,comm``): one histogram per call path into FUNC, bpftrace's
``@[@stack[tid]] = hist(nsecs - @start[tid])`` (the entry's kstack kept per thread). From 6.4 the
entry's stack rides the synthetic event to a table keyed by it; elsewhere (and by stack and comm, too
long a kernel key) each entry's stack is kept in user space until its thread returns.
"""

from __future__ import annotations

import argparse

from kprobe_tui.aggregate.model import STACK_KEY, UNITS, Aggregation, Field
from kprobe_tui.aggregate.stackrun import StackRun
from kprobe_tui.commands.aggregation import OPTIONS as AGGREGATION_OPTIONS
from kprobe_tui.commands.aggregation import add_common, builder, check_times, run_aggregation, run_stack_histogram
from kprobe_tui.commands.count import parse_keys, stack_keys
from kprobe_tui.commands.stackcost import add_yes_option, check_stack_cost

OPTIONS = AGGREGATION_OPTIONS


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "latency", help="entry-to-return time of a function, as a log2 histogram (nested calls: innermost only)",
        description=__doc__.split("\n\n", 1)[1], formatter_class=_raw_description())
    parser.add_argument("function", metavar="FUNC", help="a kernel function, or with -x BIN a function of BIN")
    parser.add_argument("--by", metavar="comm|pid|stack", help="one histogram per comm, per thread id, or per call "
                                                               "path into FUNC (stack, or stack,comm)")
    parser.add_argument("--unit", choices=list(UNITS), default="us", help="ns, us (default) or ms; the user-space "
                        "engine reads microsecond timestamps, so its nanoseconds are multiples of 1000")
    add_yes_option(parser)
    add_common(parser)
    parser.set_defaults(run=run)


def _raw_description():
    return argparse.RawDescriptionHelpFormatter


def run(args) -> int:
    check_times(args)
    by_stack = stack_keys(args.by)
    if by_stack:
        return _run_by_stack(args, by_stack)
    aggregation = Aggregation("latency", keys=parse_keys(args.by), unit=args.unit)
    top, build = builder(args)
    targets = build.latency(args.function, aggregation, args.filter)
    return run_aggregation(args, f"latency {args.function}", aggregation, top, targets)


def _run_by_stack(args, by_stack: tuple[str, ...]) -> int:
    """One latency histogram per call path into FUNC, printed as ``hist --by stack`` prints its histograms."""
    comm = (Field("comm"),) if "comm" in by_stack else ()
    top, build = builder(args)
    targets = build.latency(args.function, Aggregation("latency", keys=comm, unit=args.unit), args.filter, stacks=True)
    latency = Aggregation("latency", keys=(Field(STACK_KEY), *comm), unit=args.unit)
    run = StackRun(top, targets, bool(comm), args.filter, args.engine, latency)
    check_stack_cost(args, run, args.function)
    return run_stack_histogram(args, f"latency {args.function} --by {','.join(by_stack)}", latency, run, targets)
