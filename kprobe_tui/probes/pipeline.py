"""From what a person asks to probes in the kernel, one way for every front end: parse -> guard -> compile -> create.

``kprobe-tui probe`` and the TUI's probe builder both call ``plan`` (and ``create`` to make the
probes), so the same words give the same definitions and the same errors whichever asked. A
``ProbeRequest`` is the words of a perf-style probe command (``[[GROUP:]EVENT=]PLACE [ARG...]``)
with the caller's choices (group, filter, whether this process shows the events); a
``ProbeTarget`` is what the kernel side knows (tracefs README, the events already defined, BTF,
the function catalog). Nothing here prints or draws: a ``Plan`` is data, and ``command_rows``
says how each probe is written by hand, with perf and with bpftrace.
"""

from __future__ import annotations

import bisect
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from kprobe_tui.errors import UserError
from kprobe_tui.kernel.events import DynamicEvent, Events
from kprobe_tui.kernel.tracefs import Tracefs
from kprobe_tui.probes import guard
from kprobe_tui.probes.compile import compile_spec, running_kernel_vmlinux
from kprobe_tui.probes.guard import GuardAdvice
from kprobe_tui.probes.rawfetch import needs_debuginfo
from kprobe_tui.probes.spec import (
    DEFAULT_PERSISTENT_GROUP,
    MAX_EVENT_NAME_LEN,
    CompiledProbe,
    ProbeSpec,
    check_filter_text,
    check_group,
    check_name,
    parse_spec,
)
from kprobe_tui.stream import filterexpr

if TYPE_CHECKING:
    from kprobe_tui.kernel.catalog import Catalog
    from kprobe_tui.kernel.sources import KernelSources


@dataclass(frozen=True)
class ProbeRequest:
    """One probe command: its words and the caller's choices.

    ``group``: the group asked for (None: ``run_group``, else kprobe-tui's persistent one);
    ``run_group``: this run's group, which the caller may name (the TUI's run-scoped probes);
    ``displayed``: this process shows the events, so its own PID is filtered out (the golden rule);
    ``event`` overrides the spec's ``EVENT=``; ``filter`` is the user's own filter, checked against
    the fields the event will have; ``dialect``: whose default names and types (ProbeSpec.dialect:
    ``kprobe-tui probe`` asks for perf's).
    """

    words: tuple[str, ...]
    binary: str | None = None
    module: str | None = None  # the kernel's name for the module (see module_name)
    vmlinux: str | None = None
    fprobe: bool = False
    group: str | None = None
    run_group: str | None = None
    event: str | None = None
    filter: str | None = None
    displayed: bool = False
    dialect: str = "kprobe-tui"


class ProbeTarget:
    """What the kernel side says about a probe before it is made, read when first needed.

    ``strict``: an unreadable tracefs (README, the events already defined) is an error, as it must
    be before creating; otherwise nothing is known from it (a dry run, lab mode) and the kernel
    says the rest. ``catalog`` (or a function that makes one) refuses unknown, blacklisted and
    ambiguous kernel functions before the kernel does; without one they are left to the kernel.
    ``debuginfod``: fetches debug info that is not on disk before compiling (the CLI's client
    shows progress); without it, compiling asks the default client. ``running_kernel``: the probes are
    for the kernel this machine runs (not a snapshot's), so its debug vmlinux is looked for as perf does.
    """

    def __init__(self, tracefs: Tracefs | None = None, *, btf_path: str | Path | None = None,
                 catalog: Catalog | Callable[[], Catalog] | None = None, strict: bool = False,
                 debuginfod=None, running_kernel: bool = False) -> None:
        self.tracefs = tracefs
        self.running_kernel = running_kernel
        self.events = Events(tracefs) if tracefs is not None else None
        self.btf_path = btf_path
        self.strict = strict
        self.debuginfod = debuginfod
        self._catalog = catalog

    @classmethod
    def of(cls, sources: KernelSources | None, *, catalog: Catalog | None = None, kernel: bool = True,
           strict: bool = False, debuginfod=None) -> ProbeTarget:
        """The target ``sources`` describe (None: nothing known); ``kernel`` False: for uprobes only (no
        catalog, no BTF). The kernel catalog is built from ``sources`` only if a kernel probe needs it."""
        if sources is None:
            return cls(strict=strict, debuginfod=debuginfod)
        tracefs = sources.tracing() if sources.tracefs is not None else None
        if not kernel:
            return cls(tracefs, strict=strict, debuginfod=debuginfod)
        from kprobe_tui.kernel.catalog import Catalog  # 100k names: only for kernel probes

        return cls(tracefs, btf_path=str(sources.btf_vmlinux), catalog=catalog or (lambda: Catalog(sources)),
                   strict=strict, debuginfod=debuginfod, running_kernel=sources.live)

    @property
    def tracefs_root(self) -> str:
        return str(self.tracefs.root) if self.tracefs is not None else "/sys/kernel/tracing"

    @cached_property
    def catalog(self) -> Catalog | None:
        return self._catalog() if callable(self._catalog) else self._catalog

    @cached_property
    def readme(self) -> str:
        """tracefs README: whether this kernel takes $argN, BTF argument names, arguments at exit."""
        tracefs = self.tracefs
        if tracefs is None:
            return ""
        return self._tolerant(lambda: tracefs.read("README") if tracefs.exists("README") else "", "")

    def taken(self, group: str) -> list[str]:
        """Event names already in ``group`` (the kernel refuses a duplicate; defaults step aside)."""
        events = self.events
        if events is None:
            return []
        return self._tolerant(lambda: [event.event for event in events.events_in(group)], [])

    def _tolerant(self, read, empty):
        """What ``read()`` answers; ``empty`` where tracefs cannot be read, unless ``strict``."""
        try:
            return read()
        except UserError:
            if self.strict:
                raise
            return empty


@dataclass
class Plan:
    """What a request compiles to: the spec, its probes (definitions checked), and the guard's advice."""

    spec: ProbeSpec
    probes: list[CompiledProbe]
    advice: GuardAdvice
    notes: list[str] = field(default_factory=list)  # about the debug info found (a vmlinux of another build)

    @property
    def group(self) -> str:
        return self.probes[0].group


class GuardUnconfirmed(UserError):
    """The feedback guard warns about this probe and nobody confirmed it: nothing was created."""


def resolve_group(request: ProbeRequest) -> str:
    """The group probes go to: the one asked for (checked), else this run's, else kprobe-tui's persistent one."""
    if request.group:
        return check_group(request.group, own=request.run_group)
    return request.run_group or DEFAULT_PERSISTENT_GROUP


def parse(request: ProbeRequest) -> tuple[ProbeSpec, GuardAdvice]:
    """The spec a request asks for, its filter joined with the guard's (our own PID when displayed)."""
    group = resolve_group(request)
    spec = parse_spec(list(request.words), binary=request.binary, fprobe=request.fprobe, group=group,
                      module=request.module)
    spec = replace(spec, dialect=request.dialect)
    if request.event:
        spec = replace(spec, event=check_name(request.event, "event", MAX_EVENT_NAME_LEN))
    wanted = (request.filter or "").strip() or None
    if wanted:
        check_filter_text(wanted)
    advice = guard.advise(spec, exclude_pids=None if request.displayed else [])
    combined = guard.combine_filters(wanted, advice.filter if request.displayed else None)
    if combined and combined != wanted:
        check_filter_text(combined)  # ours added: it must still fit in one write
    return replace(spec, filter=combined), advice


def plan(request: ProbeRequest, target: ProbeTarget, also_taken: Iterable[str] = ()) -> Plan:
    """Parse, guard, check the kernel function, compile and check the filter's fields: a Plan or a UserError.

    ``also_taken``: names planned but not made yet (several probes in one command: ``_1``, ``_2``...)."""
    spec, advice = parse(request)
    if not spec.is_uprobe and spec.function and target.catalog is not None:
        check_kernel_function(spec.function, target.catalog, spec.module)
    vmlinux = request.vmlinux
    if vmlinux is None and target.running_kernel:
        vmlinux = running_kernel_vmlinux(spec, target.debuginfod)
    notes = _fetch_debuginfo(spec, vmlinux, target.debuginfod) if target.debuginfod is not None else []
    group = spec.group or DEFAULT_PERSISTENT_GROUP
    probes = compile_spec(spec, group, [*target.taken(group), *also_taken], readme=target.readme, vmlinux=vmlinux,
                          btf_path=target.btf_path)
    if request.filter and request.filter.strip():  # as typed: an error's position is a column of the user's text
        filterexpr.check_fields(request.filter, [arg.name for arg in probes[0].args])
    return Plan(spec, probes, advice, notes)


class AlreadyMade(UserError):
    """The same probes are in the kernel already, under other names: nothing was created."""


def create(plan: Plan, events: Events, *, run_scoped: bool = False, pin: bool = False,
           confirmed: bool = False, again: bool = False, replacing: DynamicEvent | None = None) -> list[DynamicEvent]:
    """Make the plan's probes (all or none); ``pin`` moves run-scoped ones to the persistent group.

    A probe the feedback guard warns about is made only when ``confirmed``. One that probes the same place
    with the same arguments as an event already in its group is refused unless ``again`` (perf's command
    line makes such twins on purpose): a second copy would record and count every hit twice. ``replacing``: the
    event an edit deletes once these are made, which is no twin."""
    if not again:
        twins = [event for event in events.identical(plan.probes, DEFAULT_PERSISTENT_GROUP if pin else plan.group)
                 if replacing is None or event.full_name != replacing.full_name]
        if twins:
            raise AlreadyMade(f"{', '.join(event.full_name for event in twins)} already probes this (same place, "
                              "same arguments): nothing was made", "its events are on the events screen; change an "
                              "argument, the place or the kind to make another probe")
    if plan.advice.needs_confirmation and not confirmed:
        offer = f"--filter {shlex.quote(plan.advice.session_filter)} to leave your session out, and " \
            if plan.advice.session_filter else ""
        raise GuardUnconfirmed(f"{plan.spec.function}: on the SSH output path", f"add {offer}--yes to create it anyway")
    made = events.create(plan.probes, run_scoped=run_scoped)
    return [events.pin(event) for event in made] if pin else made


def check_kernel_function(name: str, catalog: Catalog, module: str | None = None) -> None:
    """Refuse unknown, blacklisted and ambiguous kernel functions before the kernel does, with the reason.

    With ``module`` the place is MODULE:name, which the kernel resolves in that module: the name
    may also be a vmlinux symbol (or another module's), but it must be this module's."""
    from kprobe_tui.kernel.catalog import Status  # here: ~3 ms to import (-X importtime); only kernel probes need it

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
    if status is Status.NO_KPROBES:
        raise UserError(f"{name!r}: {reason}", "see what this kernel allows: kprobe-tui doctor (D in the TUI)")
    if status.refused:
        raise UserError(f"{name!r}: {reason}", "pick another function (kprobe-tui funcs lists probeable ones)")


def module_name(word: str) -> str:
    """The name the kernel knows a module by, for -m NAME or -m PATH (its .modinfo)."""
    from kprobe_tui.debuginfo.modules import find_module_debuginfo  # here: ~4 ms to import (-X importtime); only -m needs it
    from kprobe_tui.debuginfo.modules import module_name as spelled  # (the same module)

    if "/" in word or word.endswith((".ko", ".debug")):
        module = find_module_debuginfo(word).module
        if module is None:
            raise UserError(f"{word}: names no kernel module", "give -m with a module's name or its .ko file")
        return module
    return spelled(word)


def _fetch_debuginfo(spec: ProbeSpec, vmlinux: str | None, debuginfod) -> list[str]:
    """Bring debug info not on disk first, through the caller's client: compiling opens it again, from disk."""
    if not needs_debuginfo(spec) or not (spec.is_uprobe or spec.module or vmlinux):
        return []
    from kprobe_tui.debuginfo.scope import open_debuginfo  # here: ~14 ms to import (-X importtime); only a probe reading C needs it

    info = open_debuginfo(binary=spec.binary, vmlinux=vmlinux, module=spec.module, debuginfod=debuginfod)
    return [info.located.note] if info.located.note else []
