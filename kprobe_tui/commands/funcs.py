"""``kprobe-tui funcs [PATTERN]``: like ``perf probe --funcs``, but says which functions the kernel refuses.

``-x BINARY`` lists a program's or library's functions with their statuses (as the TUI's ``-x``
browser shows them); ``-m MODULE`` the functions of one kernel module.
"""

from __future__ import annotations

import json
import sys

from kprobe_tui.matching import Matcher
from kprobe_tui.textsafe import printable

OPTIONS = frozenset({"binary", "module"})


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "funcs", help="list probeable functions, kernel or -x BINARY (blacklist-aware)",
        description="List the probeable functions of the kernel, of one kernel module (-m MODULE) or of a "
                    "program or library (-x BINARY); --all: every function, with its status and why.",
    )
    parser.add_argument("pattern", nargs="?", default="", help="glob (tcp_*) or plain substring")
    parser.add_argument("--all", action="store_true", help="every function, with its status and reason")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.set_defaults(run=run)


def run(args) -> int:
    matcher = Matcher.for_query(args.pattern)
    catalog = _catalog(args, matcher)
    for note in catalog.notes:
        print(f"note: {note}", file=sys.stderr)
    labels = getattr(catalog, "labels", None)  # a binary's statuses have names of their own
    module = module_name(args.module) if args.module else None
    out = sys.stdout
    for name in matcher.filter(catalog.names):
        status, reason = catalog.classify(name)
        if not (args.all or status.probeable) or (module is not None and catalog.module(name) != module):
            continue
        shown = labels[status] if labels else status.value
        if args.json:
            record = catalog.function(name).to_json()
            out.write(json.dumps({**record, "status": shown}) + "\n")
        elif args.all:  # names come from a kallsyms file or an ELF symbol table: one line each, whatever they hold
            out.write(f"{printable(name)}\t{shown}\t{printable(reason)}\n")
        else:
            out.write(printable(name) + "\n")
    return 0


def _catalog(args, matcher: Matcher):
    if args.binary:
        from kprobe_tui.probes.binary import BinaryCatalog  # here: probes.binary costs ~14 ms to import (-X importtime) and only -x needs it

        return BinaryCatalog(args.binary)
    from kprobe_tui.kernel import sources  # here: kernel.sources costs ~7 ms to import (-X importtime) and -x never needs it
    from kprobe_tui.kernel.catalog import Catalog  # here: ~9 ms to import (-X importtime), and -x never needs it

    # --json shows sizes, which need every symbol's address; a listing needs only the matching names.
    return Catalog(sources.from_args(args), matcher if not args.json else None, attach_methods=args.all or args.json)


def module_name(word: str) -> str:
    """The name the kernel knows a module by, for -m NAME or -m FILE (its .modinfo)."""
    from kprobe_tui.debuginfo import modules  # here: debuginfo.modules costs ~11 ms to import (-X importtime) and only -m needs it (tail imports this module)

    if "/" in word or word.endswith((".ko", ".debug")):
        found = modules.find_module_debuginfo(word).module
        assert found is not None  # a module's debug info is found with its name (find_module_debuginfo)
        return found
    return modules.module_name(word)
