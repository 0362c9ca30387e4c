"""``kprobe-tui hist SPEC FIELD``: the distribution of a captured value, like bpftrace's hist()/lhist().

``hist __alloc_pages order``, ``hist -x ./prog 'work:3' len``: SPEC and FIELD are what ``kprobe-tui
probe`` takes. Log2 buckets by default ([0], [1], [2, 4), ...), linear with ``--linear MIN,MAX,STEP``,
per key with ``--by``; count, sum, min, max and average beside them.
"""

from __future__ import annotations

import re

from kprobe_tui.aggregate.model import Aggregation, Field, parse_linear
from kprobe_tui.aggregate.stackrun import STACK_KEY, StackRun
from kprobe_tui.aggregate.targets import Targets, argument_name
from kprobe_tui.commands.aggregation import OPTIONS as AGGREGATION_OPTIONS
from kprobe_tui.commands.aggregation import add_common, builder, check_times, existing_events, run_aggregation, run_stack_histogram
from kprobe_tui.commands.count import parse_keys, stack_keys
from kprobe_tui.commands.stackcost import add_yes_option, check_stack_cost
from kprobe_tui.errors import UserError
from kprobe_tui.probes.spec import parse_arg

OPTIONS = AGGREGATION_OPTIONS
# The fetch-arg types the kernel prints as a number: integers (decimal or hex) and bitfields.
NUMERIC_TYPE = re.compile(r"[sux](?:8|16|32|64)|b\d+@\d+/(?:8|16|32|64)", re.ASCII)


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("hist", help="histogram of a captured value (log2 or --linear)")
    parser.add_argument("spec", metavar="SPEC", help="a probe as `kprobe-tui probe` takes it, e.g. __alloc_pages or 'work:3', "
                                                     "or an existing event (GROUP:EVENT)")
    parser.add_argument("field", metavar="FIELD", help="the value: a variable, member, $argN or NAME=EXPR[:TYPE]")
    parser.add_argument("--linear", metavar="MIN,MAX,STEP", help="linear buckets (bpftrace's lhist) instead of log2; a negative MIN as --linear=-100,100,10")
    parser.add_argument("--by", metavar="KEY[,KEY]", help="one histogram per comm, pid, probe or captured argument; "
                                                          "or per stack (stack, or stack,comm): who calls it with what")
    add_yes_option(parser)
    add_common(parser)
    parser.set_defaults(run=run)


def check_numeric(targets: Targets, value: Field, field: str) -> None:
    """A histogram sums and buckets its value: the kernel prints a char, string, symbol or array as text,
    which neither engine can add (the user-space one failed at the first hit)."""
    captured = targets.arguments.get(value.name)
    for target in targets.items:
        for fetch in target.probe.args:
            if fetch.name == captured and fetch.type is not None and not NUMERIC_TYPE.fullmatch(fetch.type):
                raise UserError(f"{field}: the value of a histogram must be numeric; {fetch.name} is captured "
                                f"as {fetch.type}", "give an integer (a variable, member or $argN, or a type such as "
                                f":s64), or count by it: kprobe-tui count SPEC --by {value.name}")


def run(args) -> int:
    check_times(args)
    value = Field(argument_name(parse_arg(args.field)))
    buckets = parse_linear(args.linear) if args.linear else None
    by_stack = stack_keys(args.by)
    if by_stack:
        return _run_by_stack(args, value, buckets, by_stack)
    aggregation = Aggregation("hist", keys=parse_keys(args.by), value=value, buckets=buckets)
    found = existing_events(args, [args.spec])
    if found:  # the event's own field, as its format names it
        return run_aggregation(args, f"hist {args.spec} {args.field}", aggregation, *found, existing=True)
    top, build = builder(args)
    targets = build.histogram(args.spec, args.field, aggregation, args.filter)
    check_numeric(targets, value, args.field)
    return run_aggregation(args, f"hist {args.spec} {args.field}", aggregation, top, targets)


def _run_by_stack(args, value: Field, buckets, by_stack: tuple[str, ...]) -> int:
    """One histogram per call path (bpftrace's ``@[kstack] = hist(arg)``), counted as ``count --by stack`` is."""
    if existing_events(args, [args.spec]):
        raise UserError(f"--by {args.by}: an existing event is read as it is, without stacks",
                        "give the function as a SPEC (vfs_read), which makes a probe of its own")
    comm = (Field("comm"),) if "comm" in by_stack else ()
    top, build = builder(args)
    targets = build.histogram(args.spec, args.field, Aggregation("hist", keys=comm, value=value), args.filter,
                              stacks=True)
    check_numeric(targets, value, args.field)
    histogram = Aggregation("hist", keys=(Field(STACK_KEY), *comm), value=value, buckets=buckets)
    run = StackRun(top, targets, bool(comm), args.filter, args.engine, histogram)
    check_stack_cost(args, run, args.spec)
    return run_stack_histogram(args, f"hist {args.spec} {args.field} --by {','.join(by_stack)}", histogram, run, targets)
