"""``kprobe-tui count SPEC...``: hits per key (probe, comm, pid or a captured value), like bcc's funccount.

A SPEC is what ``kprobe-tui probe`` takes; a glob (``'vfs_*'``, ``-x BIN 'work*'``) counts every
probeable function it matches. Plain counts per probe come from ``kprobe_profile`` and
``uprobe_profile`` (no event is recorded at all); counts per key from hist triggers; where the kernel
has neither, from our own trace instance (``--engine user``).
"""

from __future__ import annotations

from kprobe_tui.aggregate.model import Aggregation, Field, parse_field
from kprobe_tui.aggregate.stackrun import STACK_KEY, StackRun
from kprobe_tui.aggregate.targets import DEFAULT_MAX_PROBES
from kprobe_tui.commands.aggregation import OPTIONS as AGGREGATION_OPTIONS
from kprobe_tui.commands.aggregation import add_common, builder, check_times, existing_events, run_aggregation, run_stack_count
from kprobe_tui.commands.stackcost import add_yes_option, check_stack_cost
from kprobe_tui.errors import UserError

OPTIONS = AGGREGATION_OPTIONS


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("count", help="count hits per probe, comm, pid or value (kernel-side where it can)")
    parser.add_argument("specs", nargs="+", metavar="SPEC",
                        help="a probe as `kprobe-tui probe` takes it ('tcp_sendmsg size'), a glob of functions ('vfs_*'), "
                             "or events that exist already, as GROUP:EVENT (probe:tcp_recvmsg; globs)")
    parser.add_argument("--by", metavar="KEY[,KEY...]",
                        help="comm, pid, probe, or a captured argument (ntohs(FIELD)/ntohl(FIELD) for network "
                             "byte order); up to 3 (default: probe); or stack, or stack,comm: who calls it")
    parser.add_argument("--folded", action="store_true",
                        help="with --by stack: one 'outer;...;inner COUNT' line a stack (flamegraph.pl, inferno, speedscope)")
    add_yes_option(parser)
    parser.add_argument("--top", type=int, metavar="N", help="only the N keys with the most hits")
    parser.add_argument("--max-probes", type=int, default=DEFAULT_MAX_PROBES, metavar="N",
                        help=f"refuse a glob matching more functions than this (default {DEFAULT_MAX_PROBES})")
    add_common(parser)
    parser.set_defaults(run=run)


def parse_keys(text: str | None, default: tuple[Field, ...] = ()) -> tuple[Field, ...]:
    if not text:
        return default
    return tuple(parse_field(part) for part in text.split(",") if part.strip())


def stack_keys(text: str | None) -> tuple[str, ...]:
    """The --by keys when they name the stack (``stack``, ``stack,comm``), else ()."""
    names = tuple(part.strip() for part in (text or "").split(",") if part.strip())
    if STACK_KEY not in names:
        return ()
    if set(names) - {STACK_KEY, "comm"} or len(set(names)) != len(names):
        raise UserError(f"--by {text}: a stack is keyed alone or with comm", "use --by stack or --by stack,comm")
    return names


def run(args) -> int:
    check_times(args)
    if args.max_probes < 1:
        raise UserError(f"--max-probes {args.max_probes}: must be at least 1")
    by_stack = stack_keys(args.by)
    if args.folded and not by_stack:
        raise UserError("--folded prints stacks", "add --by stack")
    found = existing_events(args, args.specs)
    if found and by_stack:
        raise UserError(f"--by {args.by}: existing events are counted by comm, pid, probe or their fields",
                        "count a function by stack as a SPEC (tcp_recvmsg), which makes its own probe")
    if by_stack:
        by_comm = "comm" in by_stack
        top, build = builder(args)
        targets = build.counting(args.specs, Aggregation("count", keys=(Field("comm"),) if by_comm else ()), args.filter,
                                 stacks=True)
        run = StackRun(top, targets, by_comm, args.filter, args.engine)
        check_stack_cost(args, run, " ".join(args.specs))
        return run_stack_count(args, f"count {' '.join(args.specs)} --by {','.join(by_stack)}", run, targets)
    aggregation = Aggregation("count", keys=parse_keys(args.by, (Field("probe"),)), top=args.top)
    if found:
        return run_aggregation(args, f"count {' '.join(args.specs)}", aggregation, *found, existing=True)
    top, build = builder(args)
    targets = build.counting(args.specs, aggregation, args.filter)
    return run_aggregation(args, f"count {' '.join(args.specs)}", aggregation, top, targets)
