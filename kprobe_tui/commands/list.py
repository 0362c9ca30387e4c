"""``kprobe-tui list``: every dynamic event on the system, kprobe-tui's marked, stale runs flagged."""

from __future__ import annotations

import fnmatch
import json

from kprobe_tui.commands.funcs import module_name
from kprobe_tui.kernel import sources
from kprobe_tui.kernel.events import Events, Owner

# -x BINARY: only the uprobes on that file; -m MODULE: only the kprobes in that module.
OPTIONS = frozenset({"binary", "module"})
_MARK = {Owner.THIS_RUN: "*", Owner.PERSISTENT: "+", Owner.OTHER_RUN: "~", Owner.STALE: "!", Owner.OTHERS: " "}


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("list", help="list all dynamic events (kprobe-tui's marked)")
    parser.add_argument("pattern", nargs="?", default="*", help="glob on GROUP/EVENT (default: all)")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.set_defaults(run=run)


def run(args) -> int:
    events = Events(sources.from_args(args).tracing())
    module = module_name(args.module) if args.module else None
    shown = [e for e in events.list() if (fnmatch.fnmatchcase(e.full_name, args.pattern) or fnmatch.fnmatchcase(e.event, args.pattern))
             and e.is_on(args.binary, module)]
    for event in shown:
        if args.json:
            print(json.dumps(event.to_json()))
        else:
            print(f"{_MARK[event.owner]} {event.definition}")
    if not args.json and any(e.owner == Owner.STALE for e in shown):
        print("\n! left by a kprobe-tui that died: remove with kprobe-tui cleanup")
    if not args.json and shown:
        print("(+ kprobe-tui persistent, * this run, ~ another running kprobe-tui, ! stale)")
    return 0
