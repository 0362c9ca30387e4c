"""``kprobe-tui probe``: perf probe's command line, put kprobe-tui where perf is in any perf probe lab.

Every option and form of ``perf probe`` (perfprobe/args.py) makes, lists and removes probes as perf
does: the same groups (``probe``, ``probe_<program>``) and names (``func__return``, ``func_L3``,
``_1`` with -f), the same definitions in kprobe_events (kernel places are written SYMBOL+OFFSET where
perf writes _text+OFFSET: the same address), the same text on the same stream, the same exit status.
Probes go through the one pipeline (probes/pipeline.py), so the feedback guard, the checks before
anything is written and the all-or-nothing create are the TUI builder's too.

kprobe-tui's additions never change perf's text: ``--explain`` prints each probe's tracefs line,
perf and bpftrace commands and notes after it (stdout), ``--json`` replaces it, ``-v`` adds notes on
stderr, and anything else kprobe-tui has to say goes to stderr prefixed ``kprobe-tui:``. The probes
it makes are remembered as its own (kernel/registry.py) whatever their group, for ``list`` and ``del``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import replace

from kprobe_tui.commands.lines import open_target
from kprobe_tui.errors import UserError
from kprobe_tui.kernel.tracefs import KernelRefused
from kprobe_tui.matching import Matcher
from kprobe_tui.perfprobe import args as perfargs
from kprobe_tui.perfprobe.args import E2BIG, EEXIST, EINVAL, ENOENT, PerfCommand, PerfError, PerfUsageError
from kprobe_tui.perfprobe.strfilter import StrFilter
from kprobe_tui.probes.notes import INLINED_NOTE, prologue_entry
from kprobe_tui.textsafe import printable

OPTIONS = frozenset({"binary", "vmlinux", "module", "source_dir"})
_TOP_FLAGS = {"binary": "-x", "vmlinux": "-k", "module": "-m", "source_dir": "-s"}
_OFFLINE = ("snapshot", "tracefs", "debugfs", "kallsyms", "btf")
_MESSAGE = "kprobe-tui: "


def add_parser(subparsers) -> None:
    """Only for ``kprobe-tui --help``'s list: the command line itself is read by perfprobe/args.py."""
    parser = subparsers.add_parser("probe", add_help=False,
                                   help="perf probe's command line: add (-a), list (-l), delete (-d), -L, -V, -F, -D")
    parser.set_defaults(run=run)


def prepare(args) -> None:
    """Read the words after ``probe`` as perf would; options given before ``probe`` count as given first."""
    words = []
    for dest, flag in _TOP_FLAGS.items():
        if getattr(args, dest, None) is not None:
            words += [flag, getattr(args, dest)]
    for name in _OFFLINE:
        if getattr(args, name, None) is not None:
            words += [f"--{name}", getattr(args, name)]
    args.run = run
    try:
        args.perf = perfargs.parse([*words, *args.words])
    except (PerfUsageError, PerfError) as exc:
        args.perf = exc


def run(args) -> int:
    command = args.perf
    try:
        if isinstance(command, UserError):
            raise command
        if command.help:
            sys.stdout.write(perfargs.usage())
            return 0
        if command.action is None:
            sys.stderr.write(perfargs.usage())
            return perfargs.USAGE
        return _ACTIONS[command.action](command)
    except (PerfUsageError, PerfError) as exc:
        _say(str(exc))
        return exc.status


def _say(text: str) -> None:
    print(_MESSAGE + printable(text, keep="\n"), file=sys.stderr)


def _sources(command: PerfCommand):
    from kprobe_tui.kernel import sources  # here, not above: kernel.sources costs ~6 ms to import (-X importtime) and -L, -V never need it

    return sources.from_args(argparse.Namespace(**{name: command.offline.get(name) for name in _OFFLINE}))


def _failed(exc: UserError, status: int) -> PerfError:
    return PerfError(exc.message, exc.hint, status)


# -- -a, -D and the words after the options --------------------------------------------------------


def _add(command: PerfCommand, show_only: bool = False) -> int:
    kernel = _sources(command)
    tracefs = kernel.tracing() if kernel.tracefs is not None else None
    strict = not (command.dry_run or show_only)
    plans = [_plan(command, definition, kernel, tracefs, strict) for definition in command.definitions]
    readme = plans[0][1].readme if plans else ""
    plans = _named(command, plans, show_only, appends="Create/append/" in readme)
    if show_only:
        for plan, _ in plans:
            sys.stdout.writelines(f"{probe.definition()}\n" for probe in plan.probes)
        return 0
    for plan, _ in plans:
        for warning in plan.advice.warnings:
            _say(f"warning: {warning}")
    if not command.dry_run:
        _create(command, plans)
    _report(command, [plan for plan, _ in plans])
    return 0


def _plan(command: PerfCommand, definition, kernel, tracefs, strict: bool):
    """One definition compiled through the pipeline, in perf's dialect, with perf's default group."""
    from kprobe_tui.probes import pipeline  # here, not above: the pipeline costs ~49 ms to import (-X importtime) and only -a/-D need it
    from kprobe_tui.probes.spec import TypeRefused  # (~31 ms alone, -X importtime; loaded by the pipeline)
    from kprobe_tui.stream.filterexpr import FilterError  # (~12 ms alone, -X importtime; loaded by the pipeline)

    try:
        module = pipeline.module_name(definition.module) if definition.module else None
        request = pipeline.ProbeRequest(definition.words, binary=definition.binary, module=module,
                                        vmlinux=command.vmlinux, fprobe=command.fprobe, filter=command.event_filter,
                                        group=command.group or _default_group(definition.binary), dialect="perf")
        pipeline.parse(request)
    except TypeRefused as exc:
        raise _failed(exc, EINVAL) from None
    except UserError as exc:  # bad syntax: perf's usage status when an option carried it, -EINVAL after the options
        raise _failed(exc, perfargs.USAGE if definition.from_option else EINVAL) from None
    target = pipeline.ProbeTarget(
        tracefs, btf_path=str(kernel.btf_vmlinux), strict=strict, debuginfod=_debuginfod(command), running_kernel=kernel.live,
        catalog=None if definition.binary else (lambda: _catalog_for(kernel, request)))
    try:
        plan = pipeline.plan(request, target)
    except FilterError as exc:  # an --event-filter that does not parse
        raise _failed(exc, EINVAL) from None
    except UserError as exc:
        raise _failed(exc, ENOENT) from None
    for note in plan.notes:
        _say(f"note: {note}")
    if command.no_inlines:
        kept = [p for p in plan.probes if not any(note.startswith(INLINED_NOTE) for note in p.notes)]
        if not kept:
            raise PerfError(f"{' '.join(definition.words)}: only inlined copies, and --no-inlines leaves them out",
                            "drop --no-inlines", ENOENT)
        plan = replace(plan, probes=kept)
    if len(plan.probes) > command.max_probes:
        raise PerfError(f"too many ({len(plan.probes)} > {command.max_probes}) probe points found for "
                        f"{' '.join(definition.words)}", "raise --max-probes, or be more specific (FUNC@SRC, :LINE)", E2BIG)
    return plan, target


def _default_group(binary: str | None) -> str:
    """perf's PERFPROBE_GROUP, or probe_<program> for -x (convert_exec_to_group: cut at its first non-name character)."""
    if binary is None:
        return "probe"
    name = re.split(r"[^A-Za-z0-9_]", os.path.basename(binary), maxsplit=1)[0]
    return f"probe_{name}"


def _catalog_for(kernel, request):
    """The kernel's functions of this name only: enough to refuse an unknown or blacklisted one, in a tenth of the time."""
    from kprobe_tui.kernel.catalog import Catalog  # here, not above: the catalog costs ~8 ms to import (-X importtime) and only kernel probes need it

    words = request.words[0].split("=", 1)[-1] if request.words else ""
    function = words.split("%", 1)[0].split("+", 1)[0].split(":", 1)[0].split("@", 1)[0].split(";", 1)[0]
    if not function or any(char in function for char in "*?[\\"):
        return Catalog(kernel, attach_methods=False)
    return Catalog(kernel, Matcher(function, "glob"), attach_methods=False)


def _debuginfod(command: PerfCommand):
    def client():
        from kprobe_tui.commands import progress  # here: progress costs ~12 ms to import (-X importtime) and only a download needs it

        return progress.client(quiet=command.json or command.quiet)

    return client


def _named(command: PerfCommand, plans, show_only: bool, appends: bool):
    """perf's names: the base name where it is free; when the kernel has it, an error (EEXIST) unless -f,
    which takes BASE_1, BASE_2... (``work__return`` taken gives ``work_1``, as perf's get_new_event_name).
    Names are checked against the events the kernel had before this command (perf reads them once);
    -D checks none. Each probe keeps its own base name (SRC;PTN: the function holding its line), and a
    kernel that can append probes to an event takes repeats of it as one event; one that cannot gets a
    name per probe. Probes after a definition's first may always take a suffix (perf's allow_suffix)."""
    taken_at_start: dict[str, set[str]] = {}
    named = []
    for plan, target in plans:
        group = plan.group
        if group not in taken_at_start:
            taken_at_start[group] = set() if show_only else set(target.taken(group))
        taken = set(taken_at_start[group])
        probes = []
        for index, probe in enumerate(plan.probes):
            name = probe.event
            if name in taken:
                if not (command.force or index > 0):
                    raise PerfError(f'event "{name}" already exists in group {group}',
                                    f"remove it (kprobe-tui probe -d {group}:{name}), or add -f to add this one as {name}_1",
                                    EEXIST)
                stem = name.removesuffix("__return") if plan.spec.is_return else name
                name = next(f"{stem}_{n}" for n in range(1, 10000) if f"{stem}_{n}" not in taken)
            if not appends:
                taken.add(name)
            probes.append(replace(probe, event=name))
        named.append((replace(plan, probes=probes), target))
    return named


def _create(command: PerfCommand, plans) -> None:
    """Every definition's probes, in order; when one fails, those made before it are removed too."""
    from kprobe_tui.probes import pipeline  # here, not above: the pipeline costs ~49 ms to import (-X importtime) and only -a/-D need it

    made = []
    try:
        for plan, target in plans:
            if target.events is None:
                raise PerfError("no tracefs to create the probe in", "mount tracefs, or use --dry-run", ENOENT)
            # again: perf makes a second copy of a probe when asked to (another name, or -f)
            made.append((target.events, pipeline.create(plan, target.events, confirmed=command.yes, again=True)))
    except UserError as exc:
        for events, created in reversed(made):
            for event in created:
                events.delete(event)
        if isinstance(exc, PerfError):
            raise
        if isinstance(exc, pipeline.GuardUnconfirmed):
            raise PerfError(exc.message, exc.hint, 2) from None
        status = EINVAL
        if isinstance(exc, KernelRefused):
            errno = getattr(exc.__cause__, "errno", None)
            status = 256 - errno if errno else EINVAL
        raise _failed(exc, status) from None


def _report(command: PerfCommand, plans) -> None:
    from kprobe_tui.perfprobe import text  # here, not above: perfprobe.text costs ~33 ms to import (-X importtime); -L, -V never need it
    from kprobe_tui.probes.render import bpftrace_oneliner, by_event, command_rows, perf_command  # (~36 ms alone, -X importtime)

    if command.json:
        print(json.dumps([
            {"group": p.group, "event": p.event, "control_file": p.control_file, "definition": p.definition(),
             "filter": plan.spec.filter, "perf": perf_command(plan.spec, p.group, p.event),
             "bpftrace": bpftrace_oneliner(plan.spec, [p]), "notes": list(p.notes), "created": not command.dry_run}
            for plan in plans for p in plan.probes
        ], indent=2))
        return
    lines, last = [], None
    for plan in plans:
        entry = next((e for e in (prologue_entry(p.notes) for p in plan.probes) if e is not None), None)
        if entry is not None and not command.quiet:
            sys.stderr.write(text.PROLOGUE_SKIPPED.format(entry=entry))
        point = text.asked_point(plan.spec).text()
        where = plan.spec.binary or plan.spec.module
        args = [text.asked_arg(arg) for arg in plan.spec.args]
        for probe in plan.probes:
            lines.append(text.event_line(probe.group, probe.event, point, where, args))
            last = (probe.group, probe.event)
            if command.verbose:
                for note in probe.notes:
                    _say(f"note: {probe.group}:{probe.event}: {note}")
    if not command.quiet:
        sys.stderr.write(printable(text.added(lines, last), keep="\n\t"))
    if command.explain:
        for plan in plans:
            for same in by_event(plan.probes):
                print(f"{same[0].group}:{same[0].event}")
                for note in dict.fromkeys(note for probe in same for note in probe.notes):
                    print(f"  {'note:':<9} {note}")
                for label, row in command_rows(plan.spec, same):
                    print(f"  {label + ':' if label else '':<9} {row}")


# -- -d --------------------------------------------------------------------------------------------


def _filter(command: PerfCommand):
    try:
        found = StrFilter(command.filters[0])
        for more in command.filters[1:]:
            found = found.or_(more)
    except UserError as exc:
        raise _failed(exc, EINVAL) from None
    return found


def _delete(command: PerfCommand) -> int:
    """perf's del_perf_probe_events: every kprobe and uprobe event (or fprobe of ours) whose EVENT or GROUP:EVENT
    the filter takes; another running kprobe-tui's probes are left to it."""
    from kprobe_tui.kernel.events import OTHER_RUN, Events  # here, not above: kernel.events costs ~29 ms to import (-X importtime); -L, -V never need it

    chosen = _filter(command)
    events = Events(_sources(command).tracing())
    matched = [e for e in events.list() if e.prefix in "prf" and (chosen.matches(e.event) or chosen.matches(f"{e.group}:{e.event}"))]
    kept = [e for e in matched if e.owner == OTHER_RUN]
    for event in kept:
        _say(f"left {event.group}:{event.event}: in use by another running kprobe-tui")
    doomed = [e for e in matched if e.owner != OTHER_RUN]
    if not doomed:
        if not command.quiet and not kept:
            sys.stderr.write(printable(f'"{chosen.text}" does not hit any event.\n', keep="\n"))
        raise PerfError("failed to delete events: none matched", "see them with: kprobe-tui probe -l", ENOENT)
    from kprobe_tui.perfprobe.text import removed  # here: perfprobe.text costs ~33 ms to import (-X importtime); -d needs it only when something matched

    # perf: kprobe_events first, then uprobe_events, each in the order of its sorted GROUP:EVENT list (a strlist)
    for event in sorted(doomed, key=lambda e: (e.is_uprobe, f"{e.group}:{e.event}".encode())):
        try:
            events.delete(event)
        except UserError as exc:
            raise _failed(exc, EINVAL) from None
        if not command.quiet:
            sys.stderr.write(printable(removed(event.group, event.event), keep="\n"))
    return 0


# -- -l --------------------------------------------------------------------------------------------


def _list(command: PerfCommand) -> int:
    """perf's show_perf_probe_events: kprobe_events then uprobe_events, each line as the kernel lists it."""
    from kprobe_tui.kernel.events import parse_definition  # here, not above: kernel.events costs ~29 ms to import (-X importtime); -L, -V never need it
    from kprobe_tui.perfprobe import points  # (~40 ms alone, -X importtime; only -l needs it)
    from kprobe_tui.perfprobe.text import event_line  # (~33 ms alone, -X importtime)

    if command.binary is not None:
        raise PerfError("don't use --list with --exec", "list every probe with kprobe-tui probe -l, or kprobe-tui list -x BINARY", EINVAL)
    chosen = _filter(command)
    kernel = _sources(command)
    tracefs = kernel.tracing()
    kernel_debug, binaries = [], {}
    kallsyms: list[points.Kallsyms | None] = []

    def kernel_parts():
        if not kallsyms:
            try:
                kallsyms.append(points.Kallsyms(kernel.kallsyms))
            except UserError:
                kallsyms.append(None)
            kernel_debug.append(_on_disk(vmlinux=command.vmlinux))
        return kallsyms[0], kernel_debug[0]

    def binary_debug(path: str):
        if path not in binaries:
            binaries[path] = _on_disk(binary=path)
        return binaries[path]

    out = []
    for rel, is_uprobe in (("kprobe_events", False), ("uprobe_events", True)):
        if not tracefs.exists(rel):
            continue
        # perf reads each file into a strlist: its lines sorted as strcmp sorts them, not the kernel's order
        for line in sorted(tracefs.read(rel).splitlines(), key=str.encode):
            event = parse_definition(line, is_uprobe)
            if event is None or not (chosen.matches(event.event) or chosen.matches(f"{event.group}:{event.event}")):
                continue
            is_return = event.prefix == "r"
            where: str | None  # a uprobe's binary, or a kprobe's module (None: in the kernel image)
            if is_uprobe:
                point, where = points.uprobe_point(event.place, is_return, binary_debug)
            else:
                point, where = points.kernel_point(event.place, is_return, *kernel_parts())
            names = [word.split("=", 1)[0] for word in event.definition.split()[2:]]
            out.append(event_line(event.group, event.event, point.text(), where, names) + "\n")
    sys.stdout.write(printable("".join(out), keep="\n"))
    return 0


def _on_disk(**target):
    """Debug info found on disk (or in debuginfod's cache), never downloaded; None without it."""
    from kprobe_tui.debuginfo.debuginfod import Client  # here, not above: the client costs ~10 ms to import (-X importtime); only -l reads debug info
    from kprobe_tui.debuginfo.scope import open_debuginfo  # (~25 ms alone, -X importtime)

    try:
        info = open_debuginfo(debuginfod=Client(offline=True), **target)
        info.aranges  # noqa: B018  (read now: a corrupt file is "no debug info" for a listing)
        return info
    except Exception:  # a listing shows what it can: without debug info, perf falls back to symbols too
        return None


# -- -L, -V, -F ------------------------------------------------------------------------------------


def _target_args(command: PerfCommand) -> argparse.Namespace:
    return argparse.Namespace(binary=command.binary, vmlinux=command.vmlinux, module=command.module, source_dir=command.source)


def _lines(command: PerfCommand) -> int:
    # here, not above: debuginfo.lines costs ~18 ms to import (-X importtime) and only -L needs it
    from kprobe_tui.debuginfo.lines import LineSpec, find_line_range, render

    assert command.line is not None  # the "line" action is -L's, which sets it
    try:
        spec = LineSpec.parse(command.line)
    except UserError as exc:
        raise _failed(exc, perfargs.USAGE) from None
    try:
        info = open_target(_target_args(command))
        text, note = render(info, find_line_range(info, spec))
    except UserError as exc:
        raise _failed(exc, ENOENT) from None
    sys.stdout.write(printable(text, keep="\n\t"))
    if note:
        _say(f"note: {note}")
    return 0


def _vars(command: PerfCommand) -> int:
    # here, not above: describe and scope cost ~23-25 ms each to import (-X importtime); only -V needs them
    from kprobe_tui.debuginfo.describe import format_points
    from kprobe_tui.debuginfo.scope import PointSpec  # (~25 ms alone, -X importtime)

    chosen = _filter(command) if command.filters else None
    for definition in command.definitions:
        words = definition.words
        if len(words) != 1:
            raise PerfUsageError("'--vars' doesn't accept arguments", "give the probe point alone")
        try:
            spec = PointSpec.parse(words[0])
        except UserError as exc:
            raise _failed(exc, perfargs.USAGE) from None
        try:
            info = open_target(replace_target(_target_args(command), definition))
            points = info.probe_points(spec, externs=command.externs, ranges=command.range)
        except UserError as exc:
            raise _failed(exc, ENOENT) from None
        if command.no_inlines:
            points = [point for point in points if not point.is_inline]
        if not points:
            raise PerfError(f"Failed to find the address of {spec}", "the line may have no code of its own: kprobe-tui probe -L shows it",
                            ENOENT)
        if chosen is not None:
            for point in points:
                point.variables = [v for v in point.variables if chosen.matches(v.name)]
        sys.stdout.write(printable(format_points(spec, points, verbose=False, ranges=command.range), keep="\n\t"))
    return 0


def replace_target(target: argparse.Namespace, definition) -> argparse.Namespace:
    """-x/-m as they were when this -V was read (perf applies each to the definitions after it)."""
    if definition.binary or definition.module:
        return argparse.Namespace(**{**vars(target), "binary": definition.binary, "module": definition.module, "vmlinux": None})
    return target


def _funcs(command: PerfCommand) -> int:
    """perf's show_available_funcs: the sorted names of the target's functions that pass the filter (a name
    once per function: a static function of two files twice). Where perf lists data symbols and
    functions the kernel refuses to probe, kprobe-tui lists only what a probe can go on."""
    chosen = _filter(command) if command.filters else _filter(replace(command, filters=[perfargs.DEFAULT_FUNC_FILTER]))
    names = _function_names(command, chosen)
    sys.stdout.write(printable("".join(f"{name}\n" for name in sorted(names) if chosen.matches(name)), keep="\n"))
    return 0


def _function_names(command: PerfCommand, chosen) -> list[str]:
    if command.binary is not None:
        from kprobe_tui.probes.binary import defined_function_names  # here: probes.binary costs ~16 ms to import (-X importtime) and only -F -x needs it

        try:
            return defined_function_names(command.binary)
        except UserError as exc:
            raise _failed(exc, EINVAL) from None
    if command.vmlinux is not None and command.module is None:
        try:
            info = open_target(argparse.Namespace(binary=None, vmlinux=command.vmlinux, module=None, source_dir=None))
        except UserError as exc:
            raise _failed(exc, ENOENT) from None
        return [name for name, _ in info.symbols.names()]
    from kprobe_tui.kernel.catalog import Catalog, Status  # here: the catalog costs ~8 ms to import (-X importtime) and only -F on the kernel needs it

    module = _module_name(command.module) if command.module is not None else ""
    prefix = _literal_prefix(command.filters)
    matcher = Matcher(prefix + "*", "glob") if prefix else None
    catalog = Catalog(_sources(command), matcher, attach_methods=False)
    for note in catalog.notes:
        _say(f"note: {note}")
    listed = []
    for name in catalog.names:
        if not chosen.matches(name) or catalog.status(name) in (Status.BLACKLISTED, Status.FREED):
            continue
        listed += [name] * catalog.symbol_modules(name).count(module)
    return listed


def _module_name(word: str) -> str:
    from kprobe_tui.probes.pipeline import module_name  # the pipeline's imports only when a module is named

    return module_name(word)


def _literal_prefix(filters: list[str]) -> str:
    """The literal start every name must have for a filter of one plain glob (``tcp_*``): what lets
    the catalog scan kallsyms for those names alone."""
    if len(filters) != 1:
        return ""
    found = re.fullmatch(r"([A-Za-z0-9_.]+)[*?\[].*|([A-Za-z0-9_.]+)", filters[0].strip())
    return (found[1] or found[2]) if found else ""


_ACTIONS = {"add": _add, "definition": lambda command: _add(command, show_only=True), "del": _delete, "list": _list,
            "line": _lines, "vars": _vars, "funcs": _funcs}
