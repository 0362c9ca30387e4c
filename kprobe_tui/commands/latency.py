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
"""

from __future__ import annotations

from kprobe_tui.aggregate.model import UNITS, Aggregation
from kprobe_tui.commands.aggregation import OPTIONS as AGGREGATION_OPTIONS
from kprobe_tui.commands.aggregation import add_common, builder, check_times, run_aggregation
from kprobe_tui.commands.count import parse_keys

OPTIONS = AGGREGATION_OPTIONS


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "latency", help="entry-to-return time of a function, as a log2 histogram (nested calls: innermost only)",
        description=__doc__.split("\n\n", 1)[1], formatter_class=_raw_description())
    parser.add_argument("function", metavar="FUNC", help="a kernel function, or with -x BIN a function of BIN")
    parser.add_argument("--by", metavar="comm|pid", help="one histogram per comm or per thread id")
    parser.add_argument("--unit", choices=list(UNITS), default="us", help="ns, us (default) or ms; the user-space "
                        "engine reads microsecond timestamps, so its nanoseconds are multiples of 1000")
    add_common(parser)
    parser.set_defaults(run=run)


def _raw_description():
    import argparse

    return argparse.RawDescriptionHelpFormatter


def run(args) -> int:
    check_times(args)
    aggregation = Aggregation("latency", keys=parse_keys(args.by), unit=args.unit)
    top, build = builder(args)
    targets = build.latency(args.function, aggregation, args.filter)
    return run_aggregation(args, f"latency {args.function}", aggregation, top, targets)
