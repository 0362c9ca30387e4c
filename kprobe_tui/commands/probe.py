"""``kprobe-tui probe [-x BIN | -k VMLINUX] [--dry-run] SPEC [ARG ...]``: like ``perf probe -a``.

Prints the tracefs definition line(s) with the equivalent ``perf probe`` and ``bpftrace``
commands; without ``--dry-run`` creates the probe in a persistent group (``kprobe_tui``) where it
stays until ``kprobe-tui del``, as perf's do.
"""

from __future__ import annotations

import bisect
import json
import shlex
import sys

from kprobe_tui.errors import UserError
from kprobe_tui.kernel import sources
from kprobe_tui.kernel.events import Events
from kprobe_tui.probes import guard
from kprobe_tui.probes.compile import compile_spec, needs_debuginfo
from kprobe_tui.probes.render import bpftrace_oneliner, perf_command, tracefs_commands
from kprobe_tui.probes.spec import DEFAULT_PERSISTENT_GROUP, ProbeSpec, check_group, parse_spec


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


def check_kernel_function(name: str, kernel, module: str | None = None) -> None:
    """Refuse unknown, blacklisted and ambiguous kernel functions before the kernel does, with the reason.

    With ``module`` the place is MODULE:name, which the kernel resolves in that module: the name
    may also be a vmlinux symbol (or another module's), but it must be this module's."""
    from kprobe_tui.kernel.catalog import Catalog, Status

    catalog = Catalog(kernel)
    i = bisect.bisect_left(catalog.names, name)
    if not catalog.names or catalog.names[i : i + 1] != [name]:
        raise UserError(f"{name!r}: no such kernel function", f"search with: kprobe-tui funcs {shlex.quote(f'*{name}*')}")
    status, reason = catalog.classify(name)
    if module is not None:
        modules = {symbol.module for symbol in catalog.function(name).symbols}
        if modules and module not in modules:
            where = ", ".join(sorted(m or "vmlinux" for m in modules))
            raise UserError(f"{name!r} is not in module {module} (it is in {where})", "check -m MODULE (lsmod lists them)")
        if status is Status.AMBIGUOUS:
            return
    if status in (Status.BLACKLISTED, Status.AMBIGUOUS):
        raise UserError(f"{name!r}: {reason}", "pick another function (kprobe-tui funcs lists probeable ones)")


def run(args) -> int:
    check_group(args.group)
    module = _module_name(args.module) if args.module else None
    # -x is resolved and checked by parse_spec: the definition names that very file, or nothing is written
    spec = parse_spec([args.spec, *args.args], binary=args.binary, fprobe=args.fprobe, group=args.group, filter=args.filter,
                      module=module)
    kernel = sources.from_args(args)
    # Nobody displays events here, so no own-PID filter; the SSH output-path warning still applies.
    advice = guard.advise(spec, exclude_pids=[])
    for warning in advice.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if advice.needs_confirmation and not (args.yes or args.dry_run):
        offer = f"--filter {shlex.quote(advice.session_filter)} to leave your session out, and " if advice.session_filter else ""
        raise UserError(f"{spec.function}: on the SSH output path", f"add {offer}--yes to create it anyway")
    if not spec.is_uprobe and spec.function:
        check_kernel_function(spec.function, kernel, module)
    if needs_debuginfo(spec) and (spec.is_uprobe or spec.module or args.vmlinux):
        _fetch_debuginfo(spec, args)
    tracefs = kernel.tracing() if kernel.tracefs is not None else None
    events = Events(tracefs) if tracefs is not None else None
    group = spec.group or DEFAULT_PERSISTENT_GROUP
    try:
        readme = tracefs.read("README") if tracefs is not None and tracefs.exists("README") else ""
        taken = [e.event for e in events.events_in(group)] if events else []
    except UserError:
        if not args.dry_run:
            raise
        readme, taken = "", []  # a dry run needs no tracefs: this user may not read it, the kernel says the rest
    probes = compile_spec(spec, group, taken, readme=readme, vmlinux=args.vmlinux, btf_path=kernel.btf_vmlinux)
    if not args.dry_run:
        if events is None:
            raise UserError("no tracefs to create the probe in", "mount tracefs, or use --dry-run")
        events.create(probes)
    _print(spec, probes, args)
    return 0


def _module_name(word: str) -> str:
    """The name the kernel knows a module by, for -m NAME or -m PATH (its .modinfo)."""
    from kprobe_tui.debuginfo.modules import find_module_debuginfo, module_name

    if "/" in word or word.endswith((".ko", ".debug")):
        return find_module_debuginfo(word).module
    return module_name(word)


def _fetch_debuginfo(spec: ProbeSpec, args) -> None:
    """Bring debug info not on disk from debuginfod first, with progress on a terminal: compiling opens it again."""
    from kprobe_tui.commands import progress
    from kprobe_tui.debuginfo.scope import open_debuginfo

    info = open_debuginfo(binary=spec.binary, vmlinux=args.vmlinux, module=spec.module,
                          debuginfod=progress.client(quiet=args.json))
    if info.located.note:
        print(f"kprobe-tui: note: {info.located.note}", file=sys.stderr)


def _print(spec: ProbeSpec, probes, args) -> None:
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
        for label, command in zip(("tracefs:", ""), tracefs_commands(probe, spec.filter)):
            print(f"  {label:<9} {command}")
        print(f"  perf:     {perf_command(spec, probe.group, probe.event)}")
        print(f"  bpftrace: {bpftrace_oneliner(spec, probe)}")
    if not args.dry_run:
        names = " ".join(f"{p.group}:{p.event}" for p in probes)
        print(f"\nrecord with: perf record -e {names.replace(' ', ' -e ')} -aR sleep 1; remove with: kprobe-tui del {probes[0].group}/{probes[0].event}")
