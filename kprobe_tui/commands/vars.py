"""``kprobe-tui vars``: variables in scope at a probe point, printed as `perf probe -V`.

``--verbose`` also lists what perf hides and says where each variable lives, so a learner sees
why a variable cannot be captured at a given line.
"""

from __future__ import annotations

import argparse
import sys

from kprobe_tui.commands.lines import add_debuginfo_options, open_target
from kprobe_tui.errors import UserError


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "vars", help="variables in scope at a probe point (as perf probe -V)",
        description="List the parameters and locals that can be captured at each address of a probe point.",
    )
    add_debuginfo_options(parser)
    parser.add_argument("spec", metavar="SPEC", help="FUNC, FUNC:LINE (relative), FUNC%%return or FUNC@FILE")
    parser.add_argument("--externs", action="store_true", help="also list global and static variables")
    parser.add_argument("--verbose", action="store_true",
                        help="say where each variable lives, and list those perf cannot capture here")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    # imported here: pyelftools costs every other subcommand's start-up ~30 ms otherwise
    from kprobe_tui.debuginfo.describe import format_points
    from kprobe_tui.debuginfo.scope import ProbeSpec

    spec = ProbeSpec.parse(args.spec)
    info = open_target(args)
    points = info.probe_points(spec, externs=args.externs)
    if not points:
        raise UserError(f"Failed to find the address of {spec}",
                        "the line may have no code of its own: `kprobe-tui lines` shows the probeable ones")
    sys.stdout.write(format_points(spec, points, args.verbose))
    return 0
