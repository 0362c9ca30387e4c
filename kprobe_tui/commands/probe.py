"""``kprobe-tui probe [-x BIN | -k VMLINUX] [--dry-run] SPEC [ARG ...]``: like ``perf probe -a``.

Prints the tracefs definition line(s) with the equivalent ``perf probe`` and ``bpftrace``
commands; without ``--dry-run`` creates the probe in a persistent group (``kprobe_tui``) where it
stays until ``kprobe-tui del``, as perf's do.
"""

from __future__ import annotations

import json
import sys

from kprobe_tui.errors import UserError
from kprobe_tui.kernel import sources
from kprobe_tui.probes import pipeline
from kprobe_tui.probes.render import bpftrace_oneliner, command_rows, perf_command
from kprobe_tui.probes.spec import DEFAULT_PERSISTENT_GROUP


OPTIONS = frozenset({"binary", "vmlinux", "module", "source_dir"})


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("probe", help="define a kprobe/uprobe/fprobe (perf probe syntax)")
    parser.add_argument("--fprobe", action="store_true", help="an fprobe (f:) on kernel function entry or %%return")
    parser.add_argument("--group", "-g", default=DEFAULT_PERSISTENT_GROUP, help="event group (default: %(default)s)")
    parser.add_argument("--filter", "-f", metavar="EXPR", help="event filter, e.g. 'len > 100'")
    parser.add_argument("--dry-run", "-n", action="store_true", help="print the definitions, create nothing")
    parser.add_argument("--yes", "-y", action="store_true", help="go ahead when the feedback guard warns")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("spec", metavar="SPEC", help="[[GROUP:]EVENT=]FUNC[@SRC][:RLN|+OFF|%%return|;PTN] or SRC:ALN")
    parser.add_argument("args", metavar="ARG", nargs="*", help="[NAME=]VAR|$retval|$params|$vars|%%REG|@SYM|$argN[:TYPE]")
    parser.set_defaults(run=run)


def run(args) -> int:
    request = pipeline.ProbeRequest(
        (args.spec, *args.args), binary=args.binary, module=pipeline.module_name(args.module) if args.module else None,
        vmlinux=args.vmlinux, fprobe=args.fprobe, group=args.group, filter=args.filter,
    )  # -x is resolved and checked by parse_spec: the definition names that very file, or nothing is written
    # A dry run needs no tracefs (this user may not read it: the kernel says the rest); debug info
    # not on disk comes with progress on a terminal, the client imported only then (urllib, ssl).
    target = pipeline.ProbeTarget.of(sources.from_args(args), strict=not args.dry_run,
                                     debuginfod=lambda: _debuginfod(quiet=args.json))
    plan = pipeline.plan(request, target)
    for note in plan.notes:
        print(f"kprobe-tui: note: {note}", file=sys.stderr)
    # Nobody displays events here, so no own-PID filter; the SSH output-path warning still applies.
    for warning in plan.advice.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if not args.dry_run:
        if target.events is None:
            raise UserError("no tracefs to create the probe in", "mount tracefs, or use --dry-run")
        pipeline.create(plan, target.events, confirmed=args.yes)
    _print(plan, args)
    return 0


def _debuginfod(quiet: bool):
    from kprobe_tui.commands import progress

    return progress.client(quiet=quiet)


def _print(plan: pipeline.Plan, args) -> None:
    spec, probes = plan.spec, plan.probes
    if args.json:
        print(json.dumps([
            {"group": p.group, "event": p.event, "control_file": p.control_file, "definition": p.definition(),
             "filter": spec.filter, "perf": perf_command(spec, p.group, p.event), "bpftrace": bpftrace_oneliner(spec, p),
             "notes": list(p.notes), "created": not args.dry_run}
            for p in probes
        ], indent=2))
        return
    for probe in probes:
        verb = "would add" if args.dry_run else "added"
        print(f"{verb} {probe.group}/{probe.event}")
        for note in probe.notes:
            print(f"  note:     {note}")
        for label, command in command_rows(spec, probe):
            print(f"  {label + ':' if label else '':<9} {command}")
    if not args.dry_run:
        names = " ".join(f"{p.group}:{p.event}" for p in probes)
        print(f"\nrecord with: perf record -e {names.replace(' ', ' -e ')} -aR sleep 1; remove with: kprobe-tui del {probes[0].group}/{probes[0].event}")
