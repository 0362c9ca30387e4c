"""What ``count``, ``hist`` and ``latency`` share: their options, the run loop, and all their output.

Output goes through ``_out`` and ``_err`` only, so what reaches the terminal is decided in one
place: text from the traced system (comms, string keys) is escaped by ``printable`` before it is
printed (``textsafe``: a newline in a comm must not forge a line); JSON escapes control characters itself.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Callable

from kprobe_tui.aggregate.model import Aggregation
from kprobe_tui.aggregate.offer import ENGINES
from kprobe_tui.aggregate.result import Result
from kprobe_tui.aggregate.run import AggregationRun, Sample
from kprobe_tui.aggregate.stackrun import StackRun
from kprobe_tui.aggregate.targets import DEFAULT_MAX_PROBES, TargetBuilder, Targets, run_builder
from kprobe_tui.aggregate.text import render
from kprobe_tui.aggregate.user_engine import existing_targets
from kprobe_tui.commands.seconds import check_seconds
from kprobe_tui.errors import UserError
from kprobe_tui.kernel import sources
from kprobe_tui.kernel.tracefs import Tracefs
from kprobe_tui.stream.stacks import StackTable, format_bpftrace, format_folded, format_json
from kprobe_tui.textsafe import printable

ENGINE_HELP = ("where to aggregate: bpf (a BPF program of ours on each probe, no event recorded), hist (hist "
               "triggers and synthetic events), kernel (kprobe_profile for plain counts, else bpf, else hist: user "
               "space reads a table once per interval), user (events read from our trace instance and counted "
               "here), or auto (default: the kernel whenever it can; the reason is printed)")


CAP_CHECK_SECONDS = 1.0  # how often a stack run looks whether it keeps as many stacks as it may (one read of its table)

# -x BINARY: the functions counted are that program's or library's (uprobes), before or after the command.
OPTIONS = frozenset({"binary"})


def add_common(parser) -> None:
    parser.add_argument("-i", "--interval", type=float, metavar="SECONDS", help="print (and reset) a table every SECONDS")
    parser.add_argument("-d", "--duration", type=float, metavar="SECONDS", help="stop after SECONDS (default: Ctrl-C)")
    parser.add_argument("--json", action="store_true", help="one JSON object per interval (and one at the end)")
    parser.add_argument("--filter", metavar="EXPR", default="",
                        help="count only hits where EXPR holds, e.g. 'ntohs(dport) == 53 && comm != \"sshd\"'")
    parser.add_argument("--engine", choices=ENGINES, default="auto", help=ENGINE_HELP)


def check_times(args) -> None:
    check_seconds(args, "interval", "duration")


# GROUP:EVENT or GROUP/EVENT (globs allowed): events that exist already, as perf record -e names them. Never a
# SPEC: perf's FUNC:RLN and SRC:ALN end in a line number, and a source file's name has a '.'.
EXISTING_EVENT = re.compile(r"[A-Za-z_*?\[][\w*?\[\]]*[:/][A-Za-z_*?\[][\w*?\[\]]*")


def existing_events(args, specs: list[str]) -> tuple[Tracefs, Targets] | None:
    """The events the SPECs name when they are existing events (an administrator's probes, which a student in
    lab mode counts as perf record would read them): nothing is made for them; None when they are SPECs."""
    named = [spec for spec in specs if EXISTING_EVENT.fullmatch(spec)]
    if not named:
        return None
    if len(named) != len(specs) or args.binary:
        raise UserError(f"{' '.join(specs)}: existing events (GROUP:EVENT) and new probes (SPEC, -x) in one run",
                        "count either events that exist (probe:tcp_recvmsg) or probes to make, in separate runs")
    top = sources.from_args(args).tracing()
    return top, existing_targets(top, named)


def builder(args) -> tuple[Tracefs, TargetBuilder]:
    return run_builder(sources.from_args(args), args.binary, getattr(args, "max_probes", None) or DEFAULT_MAX_PROBES)


def _out(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _err(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def _say_skipped(targets: Targets) -> None:
    for why, names in targets.skipped.items():
        _err(f"kprobe-tui: skipped {len(names)} {why}: {printable(_sample_names(names))}")


def _say_tracing(targets: Targets) -> None:
    _err(f"Tracing {len(targets.items)} probe{'s' if len(targets.items) != 1 else ''}... Hit Ctrl-C to end.")


def run_aggregation(args, what: str, aggregation: Aggregation, top, targets: Targets, existing: bool = False) -> int:
    """Start, print a table per interval (or one at the end), stop; Ctrl-C ends it with the final table.
    ``existing``: the targets are events that exist already (``existing_events``), left as they are."""
    _say_skipped(targets)
    run = AggregationRun(top, aggregation, targets, args.filter, args.engine, existing=existing)
    choice = run.start()
    printed = False
    try:
        try:  # the announcements inside: a Ctrl-C as soon as they are read still ends with the final table
            _err(f"kprobe-tui: {printable(what)}: {choice.engine} engine: {choice.reason}")
            if not args.json:
                _say_tracing(targets)
            started = time.monotonic()
            deadline = started + args.duration if args.duration else None
            tick = started + args.interval if args.interval else None
            while True:
                wake = min(t for t in (tick, deadline, time.monotonic() + 3600) if t is not None)
                time.sleep(max(0.0, wake - time.monotonic()))
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    break
                if tick is not None and now >= tick:
                    _emit(args, aggregation, run.sample(), interval=True)
                    printed = True
                    tick += args.interval
        except KeyboardInterrupt:
            pass
        final = run.stop()
    finally:
        run.stop()
    if final is not None:
        if args.interval:
            if final.interval.count or not printed or args.json:
                _emit(args, aggregation, final, interval=True, last=True)
        else:
            _emit(args, aggregation, final, interval=False, last=True)
    return 0


def run_stack_count(args, what: str, run: StackRun, targets: Targets) -> int:
    """Start, print the stacks counted per interval (or once at the end), stop; Ctrl-C ends it with the last."""
    def emit(table: StackTable, start: float, end: float, interval: bool, last: bool) -> None:
        _emit_stacks(args, table, interval=interval, last=last)

    return _run_stacks(args, what, run, targets, emit, quiet=args.json or args.folded)


def run_stack_histogram(args, what: str, aggregation: Aggregation, run: StackRun, targets: Targets) -> int:
    """``run_stack_count`` for a histogram by stack: each interval's (or the whole run's) as ``hist`` prints."""
    def emit(table: StackTable, start: float, end: float, interval: bool, last: bool) -> None:
        _emit_result(args, aggregation, run.result(table, start, end), interval=interval, last=last)

    return _run_stacks(args, what, run, targets, emit, quiet=args.json)


def _run_stacks(args, what: str, run: StackRun, targets: Targets,
                emit: Callable[[StackTable, float, float, bool, bool], None], quiet: bool) -> int:
    """Start, ``emit`` what was counted per interval (or once at the end), stop; Ctrl-C ends it with the last.
    The run also stops, and says so, once it keeps as many distinct stacks as it may (checked each second)."""
    _say_skipped(targets)
    choice = run.start()
    before = StackTable(run.limit)
    started = since = time.time()
    try:
        try:
            _err(f"kprobe-tui: {printable(what)}: {choice.engine} engine: {choice.reason}")
            if not quiet:
                _say_tracing(targets)
            now = time.monotonic()
            deadline = now + args.duration if args.duration else None
            tick = now + args.interval if args.interval else None
            check = now + CAP_CHECK_SECONDS
            while True:
                wake = min(t for t in (tick, deadline, check) if t is not None)
                time.sleep(max(0.0, wake - time.monotonic()))
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    break
                if tick is not None and now >= tick:
                    table, at = run.collect(), time.time()
                    emit(table.since(before), since, at, True, False)
                    before, since, tick = table, at, tick + args.interval
                    if table.capped:
                        break
                    check = now + CAP_CHECK_SECONDS  # this read looked already
                if now >= check:
                    check = now + CAP_CHECK_SECONDS
                    if run.collect().capped:
                        break
        except KeyboardInterrupt:
            pass
        final = run.stop()
    finally:
        run.stop()
    if final is not None:
        if args.interval:
            emit(final.since(before), since, time.time(), True, True)
        else:
            emit(final, started, time.time(), False, True)
        if final.capped:
            _err(f"kprobe-tui: {final.capped_message()}")
        if final.lost:
            _err(f"kprobe-tui: {final.lost} events lost: the kernel's ring overflowed, or still held them when the run "
                 "ended (the user-space engine could not keep up; their stacks are not counted)")
        if final.garbled:
            _err(f"kprobe-tui: {final.garbled} entries of the kernel's table fit no stack (left out)")
        if note := run.shallow_note(final):
            _err(f"kprobe-tui: {note}")
    return 0


def _emit_stacks(args, table: StackTable, *, interval: bool, last: bool) -> None:
    if args.top:
        table = table.top(args.top)
    if args.json:
        _out(format_json(table, **({"final": True} if last else {})))
        return
    table = table.renamed(printable)  # a comm or a user frame's path holding a newline must not forge a line
    if interval and not args.folded:
        _out(time.strftime("[%H:%M:%S]", time.localtime()))
    text = format_folded(table) if args.folded else format_bpftrace(table)
    sys.stdout.write(text)
    sys.stdout.flush()


def _sample_names(names: list[str], shown: int = 5) -> str:
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


def _emit(args, aggregation: Aggregation, sample: Sample, *, interval: bool, last: bool = False) -> None:
    _emit_result(args, aggregation, sample.interval if interval else sample.total, interval=interval, last=last)


def _emit_result(args, aggregation: Aggregation, result: Result, *, interval: bool, last: bool) -> None:
    if args.json:
        record = result.to_json()
        if last:
            record["final"] = True
        _out(json.dumps(record))
        return
    if interval:
        _out(time.strftime("[%H:%M:%S]", time.localtime(result.end)))
    for line in render(result, aggregation, escape=printable):
        _out(line)
    _out("")
