"""``kprobe-tui del PATTERN``: remove probes. A bare EVENT glob matches only kprobe-tui's groups;
others' probes (perf's ``probe``, an admin's) are removed only when their GROUP is named, and a
group glob (``'*/*'``) that reaches into others' groups needs ``--force``, as it would remove
every dynamic event on the system."""

from __future__ import annotations

from kprobe_tui.commands.funcs import module_name
from kprobe_tui.errors import UserError
from kprobe_tui.kernel import sources
from kprobe_tui.kernel.events import OTHER_RUN, OTHERS, DynamicEvent, Events

_GLOB = set("*?[")
# -x BINARY / -m MODULE: only probes on that file, or in that module, are matched.
OPTIONS = frozenset({"binary", "module"})


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("del", help="delete probes: EVENT glob (kprobe-tui's), or GROUP/EVENT")
    parser.add_argument("patterns", metavar="PATTERN", nargs="+", help="EVENT, GROUP/EVENT or GROUP:EVENT (globs)")
    parser.add_argument("--force", "-f", action="store_true",
                        help="also remove what a group glob matches in others' groups, and probes of another running kprobe-tui")
    parser.set_defaults(run=run)


def run(args) -> int:
    events = Events(sources.from_args(args).tracing())
    module = module_name(args.module) if args.module else None
    chosen: dict[str, DynamicEvent] = {}  # by full name: an event two patterns match is removed once
    for pattern in args.patterns:
        matched = [e for e in events.match(pattern) if e.is_on(args.binary, module)]
        if not matched:
            raise UserError(f"{pattern!r}: no matching event", "see: kprobe-tui list (others' groups must be named: GROUP/EVENT)")
        group_glob = pattern.replace(":", "/", 1).rpartition("/")[0]
        others = sorted({e.group for e in matched if e.owner == OTHERS}) if _GLOB & set(group_glob) else []
        if others and not args.force:
            count = sum(1 for e in matched if e.group in others)
            shown = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
            raise UserError(f"{pattern!r} matches {count} events in groups that are not kprobe-tui's ({shown})",
                            f"name the group to remove its events (kprobe-tui del '{others[0]}/*'), "
                            "or add --force to remove all of them")
        chosen.update((e.full_name, e) for e in matched)
    busy = [e.full_name for e in chosen.values() if e.owner == OTHER_RUN]
    if busy and not args.force:
        raise UserError(f"{', '.join(busy)}: in use by another running kprobe-tui", "quit it, or pass --force")
    for event in chosen.values():
        events.delete(event)
        print(f"removed {event.full_name}")
    return 0
