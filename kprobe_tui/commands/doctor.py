"""``kprobe-tui doctor``: what this kernel and this user allow, and what to do about the rest."""

from __future__ import annotations

from kprobe_tui.kernel import capabilities, sources


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("doctor", help="report what this kernel and user allow")
    parser.set_defaults(run=run)


def run(args) -> int:
    from kprobe_tui.debuginfo.debuginfod import Client, setup_report
    from kprobe_tui.debuginfo.locate import running_kernel_build_id

    found = sources.from_args(args)
    print(capabilities.report(capabilities.detect(found)))
    # Whether a server has this kernel's debug info is asked of the running kernel only (one small request
    # to each server the user named), not of a snapshot's.
    print("\n" + "\n".join(setup_report(Client(), running_kernel_build_id() if found.live else None)))
    return 0
