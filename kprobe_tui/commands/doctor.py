"""``kprobe-tui doctor``: what this kernel and this user allow, and what to do about the rest."""

from __future__ import annotations

from kprobe_tui.kernel import capabilities, sources


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("doctor", help="report what this kernel and user allow")
    parser.set_defaults(run=run)


def run(args) -> int:
    found = sources.from_args(args)
    print(capabilities.report(capabilities.detect(found)))
    return 0
