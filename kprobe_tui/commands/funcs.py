"""``kprobe-tui funcs [PATTERN]``: like ``perf probe --funcs``, but says which functions the kernel refuses."""

from __future__ import annotations

import json
import sys

from kprobe_tui.kernel import sources
from kprobe_tui.kernel.catalog import Catalog
from kprobe_tui.matching import Matcher
from kprobe_tui.textsafe import printable


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("funcs", help="list probeable kernel functions (blacklist-aware)")
    parser.add_argument("pattern", nargs="?", default="", help="glob (tcp_*) or plain substring")
    parser.add_argument("--all", action="store_true", help="every function, with its status and reason")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.set_defaults(run=run)


def run(args) -> int:
    catalog = Catalog(sources.from_args(args))
    for note in catalog.notes:
        print(f"note: {note}", file=sys.stderr)
    matcher = Matcher.for_query(args.pattern, mode="glob" if any(c in args.pattern for c in "*?[") else "substring")
    out = sys.stdout
    for name in matcher.filter(catalog.names):
        status, reason = catalog.classify(name)
        if not (args.all or status.probeable):
            continue
        if args.json:
            out.write(json.dumps(catalog.function(name).to_json()) + "\n")
        elif args.all:  # names come from a kallsyms file or an ELF symbol table: one line each, whatever they hold
            out.write(f"{printable(name)}\t{status.value}\t{printable(reason)}\n")
        else:
            out.write(printable(name) + "\n")
    return 0
