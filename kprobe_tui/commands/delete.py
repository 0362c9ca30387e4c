"""``kprobe-tui del PATTERN``: remove probes. A bare EVENT glob matches only kprobe-tui's groups;
others' probes (perf's ``probe``, an admin's) are removed only when their GROUP is named."""

from __future__ import annotations

from kprobe_tui.errors import UserError
from kprobe_tui.kernel import sources
from kprobe_tui.kernel.events import OTHER_RUN, Events


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("del", help="delete probes: EVENT glob (kprobe-tui's), or GROUP/EVENT")
    parser.add_argument("patterns", metavar="PATTERN", nargs="+", help="EVENT, GROUP/EVENT or GROUP:EVENT (globs)")
    parser.add_argument("--force", action="store_true", help="also remove probes of another running kprobe-tui")
    parser.set_defaults(run=run)


def run(args) -> int:
    events = Events(sources.from_args(args).tracing())
    chosen = {}
    for pattern in args.patterns:
        matched = events.match(pattern)
        if not matched:
            raise UserError(f"{pattern!r}: no matching event", "see: kprobe-tui list (others' groups must be named: GROUP/EVENT)")
        chosen.update((e.full_name, e) for e in matched)
    busy = [e.full_name for e in chosen.values() if e.owner == OTHER_RUN]
    if busy and not args.force:
        raise UserError(f"{', '.join(busy)}: in use by another running kprobe-tui", "quit it, or pass --force")
    for event in chosen.values():
        events.delete(event)
        print(f"removed {event.full_name}")
    return 0
