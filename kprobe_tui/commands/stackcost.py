"""``count --by stack``'s (and ``hist --by stack``'s) cost, said before it starts: on stderr, and above
``CONFIRM_ABOVE`` of a CPU asked of the user at a terminal, or refused without ``--yes`` when no one is there
to answer (a script, a pipe)."""

from __future__ import annotations

import sys

from kprobe_tui.aggregate.estimate import CONFIRM_ABOVE, estimate
from kprobe_tui.aggregate.stackrun import StackRun
from kprobe_tui.errors import UserError
from kprobe_tui.textsafe import printable

NARROWER = "narrow the count with --filter (a comm or pid), or count for less time (-d SECONDS)"


def add_yes_option(parser) -> None:
    parser.add_argument("-y", "--yes", action="store_true",
                        help="with --by stack: count even when the hit rate measured first says it costs more than "
                             "a quarter of a CPU (without it, a terminal asks; a script is refused)")


def check_stack_cost(args, run: StackRun, what: str) -> None:
    """Measure the hit rate (its probes gone again when this returns) and say the cost; ask or refuse when high."""
    cost = estimate(run, what)
    sys.stderr.write(f"kprobe-tui: {printable(cost.line())}\n")  # the line names the SPEC as typed
    sys.stderr.flush()
    if not cost.high or args.yes:
        return
    if not sys.stdin.isatty():
        raise UserError(f"not started: counting these stacks would take more than {CONFIRM_ABOVE:.0%} of a CPU",
                        f"{NARROWER}; or add --yes to count anyway")
    sys.stderr.write("Count its stacks anyway? [y/N] ")
    sys.stderr.flush()
    answer = sys.stdin.readline().strip().lower()
    if answer not in ("y", "yes"):
        raise UserError("not started", NARROWER)
