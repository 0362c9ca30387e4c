"""``kprobe-tui doctor``: what this kernel and this user allow, and what to do about the rest."""

from __future__ import annotations

from kprobe_tui.kernel import sources

# -x BINARY: also say whether that program can be probed, and where its debug info is.
OPTIONS = frozenset({"binary"})


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("doctor", help="report what this kernel and user allow")
    parser.set_defaults(run=run)


def run(args) -> int:
    from kprobe_tui.doctor import report  # here: the report costs ~34 ms to import (-X importtime), more than --help should pay

    print(report(sources.from_args(args), args.binary))
    return 0
