"""``kprobe-tui vars``: variables in scope at a probe point, printed as `perf probe -V`.

``--verbose`` also lists what perf hides and says where each variable lives, so a learner sees
why a variable cannot be captured at a given line.
"""

from __future__ import annotations

import argparse
import sys

from kprobe_tui.commands.lines import OPTIONS as LINES_OPTIONS
from kprobe_tui.commands.lines import open_target
from kprobe_tui.errors import UserError

OPTIONS = LINES_OPTIONS


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "vars", help="variables in scope at a probe point (as perf probe -V)",
        description="List the parameters and locals that can be captured at each address of a probe point.",
    )
    parser.add_argument("spec", metavar="SPEC", help="FUNC, FUNC:LINE (relative), FUNC%%return or FUNC@FILE")
    parser.add_argument("--externs", action="store_true", help="also list global and static variables")
    shown = parser.add_mutually_exclusive_group()
    shown.add_argument("--verbose", action="store_true",
                       help="say where each variable lives, and list those perf cannot capture here")
    shown.add_argument("--range", action="store_true",
                       help="as perf probe -V --range: where in the function each variable has a location")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from kprobe_tui.debuginfo.scope import PointSpec  # here: debuginfo.scope costs ~32 ms to import (-X importtime), more than --help should pay

    spec = PointSpec.parse(args.spec)
    info = open_target(args)
    # The listing depends only on the DWARF and these words: asked again, it comes from the
    # index without parsing DWARF (nor importing pyelftools, a third of such a run).
    question = f"vars {spec} externs={args.externs} verbose={args.verbose} range={args.range} units=all"
    text = info.index.answer(question)
    if text is None:
        text = _listing(info, spec, args)
        info.index.save_answer(question, text)
    sys.stdout.write(text)
    return 0


def _listing(info, spec, args: argparse.Namespace) -> str:
    from kprobe_tui.debuginfo.describe import format_points  # here: describe costs ~32 ms to import (-X importtime), more than --help should pay

    points = info.probe_points(spec, externs=args.externs, ranges=args.range)
    if not points:
        raise UserError(f"Failed to find the address of {spec}",
                        "the line may have no code of its own: `kprobe-tui lines` shows the probeable ones")
    return format_points(spec, points, args.verbose, args.range)
