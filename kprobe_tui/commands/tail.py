"""``kprobe-tui tail``: the live event stream without the UI, one line or JSON object per event."""

from __future__ import annotations

import fnmatch
import json
import queue
import shlex
import sys
import time

from kprobe_tui.commands.funcs import module_name
from kprobe_tui.commands.seconds import check_seconds
from kprobe_tui.errors import UserError
from kprobe_tui.kernel import sources
from kprobe_tui.kernel.events import Events
from kprobe_tui.probes.guard import SocketSpotter
from kprobe_tui.stream.parser import Event
from kprobe_tui.stream.reader import StreamUpdate
from kprobe_tui.stream.session import StudentSession, open_session
from kprobe_tui.stream.store import DEFAULT_CAPACITY
from kprobe_tui.textsafe import printable

# The ring is allocated up front, 8 bytes a slot (10M slots: 76 MB before the first event), and a
# kept event takes ~300 bytes more (measured on a 3-argument uprobe line): 10M events full are ~3 GB.
# Beyond that a typo is a MemoryError, at once or hours later.
MAX_EVENTS = 10_000_000
# -x BINARY: tail the uprobes on that file (those of them EVENT names); -m MODULE: the kprobes in that module.
OPTIONS = frozenset({"binary", "module"})


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("tail", help="print probe events as they happen (for scripts and grep)")
    parser.add_argument("events", nargs="*", metavar="EVENT",
                        help="probe events: GROUP/EVENT, GROUP:EVENT or EVENT, globs allowed (default: all)")
    parser.add_argument("--filter", metavar="EXPR", help='e.g. comm == "sshd" && len > 100 || event ~ "tcp_*"')
    parser.add_argument("--json", action="store_true", help="one JSON object per event")
    parser.add_argument("--duration", type=float, metavar="S", help="stop after S seconds")
    parser.add_argument("--max-events", type=int, default=DEFAULT_CAPACITY, metavar="N",
                        help=f"events kept in memory (default {DEFAULT_CAPACITY:,})")
    parser.add_argument("--stacktrace", action="store_true", help="record the kernel stack of each event")
    parser.set_defaults(run=run)


def format_event(event: Event) -> str:
    """The kernel's own line layout, with the tgid when it differs from the pid (a thread). Each event is
    one line (its stack one more per frame): a newline or escape in a captured string is shown escaped."""
    if not event.event:
        return f"(unparsed) {printable(event.body)}"
    task = f"{event.comm}-{event.pid}" + (f"/{event.tgid}" if event.tgid not in (None, event.pid) else "")
    line = printable(f"{event.ts:.6f} [{event.cpu:03d}] {task} {event.event}: {event.body}")
    if event.stack:
        line += "".join(f"\n  => {printable(frame)}" for frame in event.stack)
    return line


def event_json(event: Event) -> str:
    return json.dumps(event.as_dict() if event.event else {"raw": event.body})


def _targets(tracefs, args) -> list[str]:
    """The EVENT patterns, narrowed to the probes on -x BINARY or in -m MODULE when one is given."""
    if args.binary is None and args.module is None:
        return args.events
    module = module_name(args.module) if args.module else None
    patterns = [p.replace(":", "/", 1) for p in args.events] or ["*"]
    chosen = [e.full_name for e in Events(tracefs).list() if e.is_on(args.binary, module)
              and any(fnmatch.fnmatchcase(e.full_name, p) or fnmatch.fnmatchcase(e.event, p) for p in patterns)]
    if not chosen:
        where = f"on {args.binary}" if args.binary else f"in module {module}"
        option = f"-x {shlex.quote(args.binary)}" if args.binary else f"-m {shlex.quote(str(module))}"
        raise UserError(f"no probe {where} matches {' '.join(args.events) or 'anything'}",
                        f"see them with: kprobe-tui list {option}")
    return chosen


def run(args) -> int:
    if not 1 <= args.max_events <= MAX_EVENTS:
        raise UserError(f"--max-events {args.max_events}: must be 1 to {MAX_EVENTS:,}",
                        "the events kept are allocated up front; for more, write them out: --json > FILE")
    check_seconds(args, "duration")
    tracefs = sources.from_args(args).tracing()
    session = open_session(tracefs, _targets(tracefs, args), args.max_events, stacktrace=args.stacktrace)
    batches: queue.SimpleQueue = queue.SimpleQueue()

    def on_update(update: StreamUpdate) -> None:
        if update.vanished or update.finished:
            batches.put(update)  # wake the main loop to report it

    render = event_json if args.json else format_event
    spotter = SocketSpotter.of_this_session()

    def emit(item: list[Event] | StreamUpdate) -> bool:
        """Print a batch or report an update; False once the reader has stopped."""
        if isinstance(item, StreamUpdate):
            for name in item.vanished:
                print(f"kprobe-tui: {name} was deleted while tailed; its events stop here", file=sys.stderr)
            if item.error:
                raise UserError(item.error)
            return not item.finished
        own = spotter.see(item)
        if own is not None:
            print(f"kprobe-tui: your SSH connection's socket is {own.name}={own.address:#x}: --filter "
                  f"{shlex.quote(own.keep)} keeps only it, --filter {shlex.quote(own.leave_out)} leaves it out",
                  file=sys.stderr)
        shown = [ev for ev in item if session.store.matches(ev)] if session.store.filtered else item
        if shown:
            sys.stdout.write("\n".join(map(render, shown)) + "\n")
            sys.stdout.flush()
        return True

    session.start(on_update, batches.put, filter_text=args.filter or "")
    try:
        if isinstance(session, StudentSession):
            how = f"by {session.perf} record -a" if session.perf else "through perf_event_open, as perf record -a samples them"
            print(f"kprobe-tui: no trace instance here: the events are sampled {how} (nothing is written to tracefs)",
                  file=sys.stderr)
        if args.filter:
            print(f"kprobe-tui: filter {session.plan.summary()}", file=sys.stderr)
        deadline = time.monotonic() + args.duration if args.duration else None
        running = True
        while running and (deadline is None or time.monotonic() < deadline):
            timeout = 0.2 if deadline is None else max(0.0, min(0.2, deadline - time.monotonic()))
            try:
                running = emit(batches.get(timeout=timeout))
            except queue.Empty:
                continue
        session.stop()  # then print what was read before the stop
        while True:
            try:
                emit(batches.get_nowait())
            except queue.Empty:
                break
    finally:
        session.stop()
        lost = session.reader.lost if session.reader else 0
        garbled = session.reader.garbled if session.reader else 0
        if lost or garbled:
            print(f"kprobe-tui: {lost} events lost by the kernel, {garbled} lines unparsed", file=sys.stderr)
    return 0
