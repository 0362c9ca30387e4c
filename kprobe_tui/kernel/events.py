"""Dynamic events in the kernel: create, enable, filter, disable, delete, list, and clean up.

Ownership: this run's probes live in its run-scoped group (``kptui_<pid>``, see ``lifetime``) and
are removed when the run ends (``lifetime.undo``); probes made to stay (``kprobe-tui probe``, the
builder's Pin) go in any group, perf's ``probe`` included, and are known to be ours by the record
``registry`` keeps of what we wrote, checked against what the kernel holds. Everything else (perf's
own probes, an admin's, another live run's) is listed and never touched unless the user names it. A failed
write leaves the event files as they were: whatever this call created before the failure is
removed before the error goes up.
"""

from __future__ import annotations

import builtins  # Events.list shadows the builtin in its annotations
import fnmatch
import functools
import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from enum import StrEnum

from kprobe_tui.errors import UserError
from kprobe_tui.kernel import lifetime, registry
from kprobe_tui.kernel.definition import DEFAULT_PERSISTENT_GROUP, MAX_EVENT_NAME_LEN, ProbeDefinition, unique_name
from kprobe_tui.kernel.tracefs import KernelRefused, Tracefs
from kprobe_tui.kernel.triggers import SYNTHETIC_GROUP, remove_run_triggers, scoped_run

__all__ = ["DynamicEvent", "Events", "OTHERS", "OTHER_RUN", "Owner", "PERSISTENT", "STALE", "THIS_RUN", "kind_of",
           "parse_definition", "probe_body"]


class Owner(StrEnum):
    """Who a group belongs to, as ``list`` marks it (a str: JSON and the columns show the value)."""

    THIS_RUN = "this run"
    PERSISTENT = "kprobe-tui"
    OTHER_RUN = "other run"  # a live kprobe-tui process
    STALE = "stale"  # a kprobe-tui run that died without cleaning up
    OTHERS = ""


# The short names callers use.
THIS_RUN, PERSISTENT, OTHER_RUN = Owner.THIS_RUN, Owner.PERSISTENT, Owner.OTHER_RUN
STALE, OTHERS = Owner.STALE, Owner.OTHERS

_KIND_FILE = {"p": "kprobe_events", "r": "kprobe_events", "f": "dynamic_events", "t": "dynamic_events", "e": "dynamic_events"}
_DEFINITION = re.compile(r"^(?P<prefix>[a-z])\d*:(?P<group>[^/\s]+)/(?P<event>\S+)\s*(?P<rest>.*)$")


def owner_of(group: str, made: bool = False) -> Owner:
    """Whose an event is: this run's, kprobe-tui's and kept (``made``: the registry says we wrote it),
    another run's, a dead run's, or someone else's."""
    if group == lifetime.own_name():
        return THIS_RUN
    if lifetime.is_run_scoped(group):
        return STALE if lifetime.is_stale(group) else OTHER_RUN
    return PERSISTENT if made else OTHERS


def instance_run(name: str) -> str | None:
    """The run an instance belongs to: its own name (``kptui_<pid>``), or a run's ``scoped_name``."""
    return name if lifetime.is_run_scoped(name) else scoped_run(name)


def probe_body(definition: str) -> tuple[str, ...]:
    """What a definition line probes and fetches, without its name, as the kernel echoes it back: the kernel
    pads a uprobe's file offset with zeros and writes a return probe's maxactive (``r16:``)."""
    head, _, rest = definition.partition(" ")
    place, *args = rest.split() or [""]
    return (head[:1], re.sub(r"0x0*(?=[0-9a-fA-F])", "0x", place), *args)


@dataclass(frozen=True)
class DynamicEvent:
    """One line of dynamic_events (or kprobe_events/uprobe_events on kernels without it)."""

    prefix: str  # p r f t e ...
    group: str
    event: str
    definition: str  # the line as the kernel shows it
    is_uprobe: bool
    made: bool = False  # a persistent probe kprobe-tui made (registry), whatever its group
    extra: tuple[str, ...] = ()  # its other probes' lines: the kernel appends a line's addresses to one event

    @property
    def definitions(self) -> tuple[str, ...]:
        """Every probe of the event, as the kernel shows them (one, or a line's several addresses)."""
        return (self.definition, *self.extra)

    @property
    def full_name(self) -> str:
        return f"{self.group}/{self.event}"

    @property
    def owner(self) -> Owner:
        if self.group == SYNTHETIC_GROUP:  # one group for everyone's: the name says whose
            run = scoped_run(self.event)
            return owner_of(run) if run else OTHERS
        return owner_of(self.group, self.made)

    @property
    def control_file(self) -> str:
        return "uprobe_events" if self.is_uprobe else _KIND_FILE.get(self.prefix, "dynamic_events")

    @property
    def place(self) -> str:
        """Where it fires, as the kernel shows it: ``func+0``, ``9p:v9fs_read+8``, ``/bin/bash:0x00..4e0``."""
        words = self.definition.split()
        return words[1] if len(words) > 1 else ""

    @property
    def binary(self) -> str | None:
        """The file a uprobe is on; None for kernel probes."""
        return re.sub(r"\(0x[0-9a-fA-F]+\)$", "", self.place).rpartition(":")[0] if self.is_uprobe else None

    @property
    def module(self) -> str | None:
        """The kernel module a kprobe's place names (``MODULE:symbol+off``); None for the core kernel."""
        if self.is_uprobe or ":" not in self.place:
            return None
        return self.place.split(":", 1)[0]

    def is_on(self, binary: str | None = None, module: str | None = None) -> bool:
        """Whether it is on this program or library (resolved, as uprobe_events names it) or this module."""
        if binary is not None and self.binary != os.path.realpath(binary):
            return False
        return module is None or self.module == module

    def to_json(self) -> dict:
        return {"group": self.group, "event": self.event, "kind": self.prefix, "uprobe": self.is_uprobe,
                "owner": self.owner, "definition": self.definition}


def kind_of(event: DynamicEvent) -> str:
    """The probe kind in words, from its prefix and place."""
    if event.prefix in "pr":
        side = "u" if event.is_uprobe else "k"
        return f"{side}{'retprobe' if event.prefix == 'r' else 'probe'}"
    if event.prefix == "f":
        return "fexit" if "%return" in event.definition.split(" ", 2)[1] else "fprobe"
    return {"t": "tprobe", "e": "eprobe", "s": "synth"}.get(event.prefix, event.prefix)


def parse_definition(line: str, is_uprobe: bool | None) -> DynamicEvent | None:
    """One line of dynamic_events, kprobe_events or uprobe_events (``is_uprobe`` None: tell from the place)."""
    match = _DEFINITION.match(line.strip())
    if not match:
        return None
    if is_uprobe is None:  # dynamic_events mixes kinds: a uprobe place is PATH:0xOFFSET
        place = match["rest"].split(" ", 1)[0]
        is_uprobe = match["prefix"] in "pr" and re.search(r":0x[0-9a-fA-F]+", place) is not None and "/" in place
    return DynamicEvent(match["prefix"], match["group"], match["event"], line.strip(), is_uprobe)


class Events:
    """Dynamic events under one tracefs root. ``Events(sources.tracing())``."""

    def __init__(self, tracefs: Tracefs) -> None:
        self.tracefs = tracefs
        self._undo_tokens: dict[str, int] = {}  # run-scoped event -> its lifetime.undo entry

    # -- reading -------------------------------------------------------------------------------

    def list(self) -> list[DynamicEvent]:
        """Every dynamic event of every owner (the persistent ones kprobe-tui made marked ``made``)."""
        listed_at = time.time()
        found: dict[str, DynamicEvent] = {}
        # uprobe_events tells uprobes apart for sure; kprobe_events exists on kernels without dynamic_events
        for rel, is_uprobe in (("dynamic_events", None), ("uprobe_events", True), ("kprobe_events", False)):
            if self.tracefs.exists(rel):
                found.update(self._read_definitions(rel, is_uprobe))
        if self.tracefs.writable:  # the live kernel: a snapshot's probes were made on another machine
            made = registry.ours(found.values(), listed_at)
            found = {name: replace(event, made=name in made) for name, event in found.items()}
        return sorted(found.values(), key=lambda e: (e.group, e.event))

    def _read_definitions(self, rel: str, is_uprobe: bool | None) -> dict[str, DynamicEvent]:
        """One control file's events, an event of several probes (lines of one name) as one."""
        found: dict[str, DynamicEvent] = {}
        for line in self.tracefs.read(rel).splitlines():
            event = parse_definition(line, is_uprobe)
            if event is None:
                continue
            first = found.get(event.full_name)
            found[event.full_name] = event if first is None else replace(first, extra=(*first.extra, event.definition))
        return found

    def events_in(self, group: str) -> builtins.list[DynamicEvent]:
        return [e for e in self.list() if e.group == group]

    def identical(self, probes: Iterable[ProbeDefinition], group: str) -> builtins.list[DynamicEvent]:
        """Events of ``group`` that probe the same place and fetch the same arguments as one of ``probes``,
        whatever their names: made again, every hit would be recorded (and counted) twice."""
        wanted = {probe_body(probe.definition()) for probe in probes}
        return [event for event in self.events_in(group) if any(probe_body(line) in wanted for line in event.definitions)]

    def match(self, pattern: str) -> builtins.list[DynamicEvent]:
        """Events a ``del`` pattern names: ``GROUP/EVENT`` or ``GROUP:EVENT`` (globs), or ``EVENT`` glob.

        Without a group only kprobe-tui's own groups match (persistent and stale runs): others'
        probes are touched only when their group is named.
        """
        group_glob, sep, event_glob = pattern.replace(":", "/", 1).rpartition("/")
        chosen = []
        for event in self.list():
            if not fnmatch.fnmatchcase(event.event, event_glob):
                continue
            if sep and fnmatch.fnmatchcase(event.group, group_glob):
                chosen.append(event)
            elif not sep and event.owner in (THIS_RUN, PERSISTENT, STALE):
                chosen.append(event)
        return chosen

    def enabled_names(self, instance: str | None = None) -> set[str]:
        """``group/event`` of every event on in the top-level buffer or an instance: its ``set_event``, one
        read instead of an enable file per event (empty where there is no such buffer or it is not readable)."""
        rel = f"instances/{instance}/set_event" if instance else "set_event"
        try:
            text = self.tracefs.read(rel)
        except UserError:
            return set()
        return {line.strip().replace(":", "/", 1) for line in text.splitlines() if line.strip()}

    def filter_of(self, group: str, event: str) -> str:
        """The event's filter in the top-level buffer ("" for none, or when it cannot be read)."""
        try:
            text = self.tracefs.read(f"events/{group}/{event}/filter").strip()
        except UserError:
            return ""
        return "" if text == "none" else text

    # -- writing -------------------------------------------------------------------------------

    def create(self, probes: Iterable[ProbeDefinition], run_scoped: bool = False) -> builtins.list[DynamicEvent]:
        """Define probes (all or none); run-scoped ones are removed when this run ends, however it ends.

        Every definition is checked before the first is written (``ProbeDefinition.check``), and each
        goes to the kernel in a write of its own: what fails leaves nothing of this call behind.
        """
        probes = list(probes)
        for probe in probes:
            probe.check()
            if run_scoped and probe.group != lifetime.run_name():
                raise UserError(f"run-scoped probes belong in group {lifetime.run_name()}, not {probe.group}")
            if not run_scoped and lifetime.is_run_scoped(probe.group):
                raise UserError(f"{probe.group!r} is a run-scoped group name, removed by cleanup",
                                "create it in a persistent group, e.g. kprobe_tui")
        created: list[ProbeDefinition] = []
        try:
            for probe in probes:
                if not self.tracefs.exists(probe.control_file):
                    raise UserError(f"this kernel has no {probe.control_file}: it cannot take {probe.group}/{probe.event}",
                                    "see what it allows: kprobe-tui doctor")
                self.tracefs.write(probe.control_file, probe.definition() + "\n")
                created.append(probe)
                if not run_scoped:  # kept after this run: remembered as ours, whatever the group
                    registry.record(probe.group, probe.event, [probe.definition()])
                if run_scoped and f"{probe.group}/{probe.event}" not in self._undo_tokens:
                    # registered at once: a signal may end the run before this call returns
                    group, event, rel = probe.group, probe.event, probe.control_file
                    self._undo_tokens[f"{group}/{event}"] = lifetime.undo.push(
                        f"probe {group}/{event}", functools.partial(self._remove, group, event, rel)
                    )
                if probe.filter:
                    self.set_filter(probe.group, probe.event, probe.filter)
        except UserError as failure:
            for group, event, rel in dict.fromkeys((p.group, p.event, p.control_file) for p in reversed(created)):
                try:
                    self._forget_and_remove(group, event, rel)
                except UserError as leftover:  # report both: the cause, and what could not be undone
                    note = f"could not remove {group}/{event}: {leftover.message}"
                    failure.hint = f"{failure.hint}; {note}" if failure.hint else note
            raise
        made: dict[str, DynamicEvent] = {}  # one per event: a line's addresses are appended to one
        for p in created:
            first = made.get(f"{p.group}/{p.event}")
            made[f"{p.group}/{p.event}"] = DynamicEvent(p.prefix, p.group, p.event, p.definition(), p.is_uprobe,
                                                        made=not run_scoped) if first is None \
                else replace(first, extra=(*first.extra, p.definition()))
        return list(made.values())

    def pin(self, event: DynamicEvent, group: str = DEFAULT_PERSISTENT_GROUP) -> DynamicEvent:
        """Keep a run-scoped probe after the run: the same definition in a persistent group, until ``del``.

        The group is part of an event's identity, so the probe is re-created there (a free name
        is taken if its own is used) and the run-scoped one removed.
        """
        if lifetime.is_run_scoped(group):
            raise UserError(f"{group!r} is a run-scoped name", "pin into a persistent group, e.g. kprobe_tui")
        name = unique_name(event.event, {e.event for e in self.events_in(group)}, MAX_EVENT_NAME_LEN)
        definitions = [f"{head.split(':', 1)[0]}:{group}/{name} {rest}"
                       for head, rest in (line.split(" ", 1) for line in event.definitions)]
        pinned = DynamicEvent(event.prefix, group, name, definitions[0], event.is_uprobe, made=True,
                              extra=tuple(definitions[1:]))
        try:
            for definition in definitions:
                self.tracefs.write(event.control_file, definition + "\n")
        except UserError:
            if self.tracefs.exists(f"events/{group}/{name}"):
                self._remove(group, name, pinned.control_file)
            raise
        registry.record(group, name, definitions)
        top_filter = self.tracefs.read(f"events/{event.group}/{event.event}/filter").strip()
        try:
            if top_filter and top_filter != "none":
                self.set_filter(group, name, top_filter)
            self.delete(event)
        except UserError:
            self._remove(group, name, pinned.control_file)
            raise
        return pinned

    def _event_dir(self, group: str, event: str) -> str:
        rel = f"events/{group}/{event}"
        if not self.tracefs.exists(rel):
            raise UserError(f"{group}/{event}: no such event", "see: kprobe-tui list")
        return rel

    def enable(self, group: str, event: str, where: Tracefs | None = None) -> None:
        """Start recording (in ``where``: an instance, else the top-level buffer)."""
        self._event_dir(group, event)
        (where or self.tracefs).write(f"events/{group}/{event}/enable", "1", append=False)

    def disable(self, group: str, event: str, where: Tracefs | None = None) -> None:
        self._event_dir(group, event)
        (where or self.tracefs).write(f"events/{group}/{event}/enable", "0", append=False)

    def set_filter(self, group: str, event: str, expression: str, where: Tracefs | None = None) -> None:
        """Set the event filter; the kernel's parse error (with caret) comes back as KernelRefused."""
        self._event_dir(group, event)
        (where or self.tracefs).write(f"events/{group}/{event}/filter", expression, append=False)

    def clear_filter(self, group: str, event: str, where: Tracefs | None = None) -> None:
        self.set_filter(group, event, "0", where)

    def delete(self, event: DynamicEvent) -> None:
        """Disable everywhere we may, then remove; a refusal (EBUSY: in use elsewhere) is surfaced."""
        self._forget_and_remove(event.group, event.event, event.control_file)

    def _forget_and_remove(self, group: str, event: str, rel: str) -> None:
        """Remove now; a run-scoped event's undo entry goes with it."""
        token = self._undo_tokens.pop(f"{group}/{event}", None)
        if token is not None:
            lifetime.undo.run(token)
        else:
            self._remove(group, event, rel)

    def delete_group(self, group: str) -> builtins.list[DynamicEvent]:
        events = self.events_in(group)
        for event in events:
            self.delete(event)
        return events

    def _remove(self, group: str, event: str, rel: str) -> None:
        for where in self._buffers():
            enable = f"events/{group}/{event}/enable"
            if where.exists(enable) and where.read(enable).strip() not in ("0", "0*"):
                where.write(enable, "0", append=False)
        try:
            self.tracefs.write(rel, f"-:{group}/{event}\n")
        except KernelRefused as exc:
            if not self.tracefs.exists(f"events/{group}/{event}"):
                registry.forget(group, event)
                return  # already gone (removed by hand or by another cleanup): nothing to undo
            raise UserError(
                f"cannot remove {group}/{event}: {exc.log.message if exc.log else exc}",
                "something else still uses it (perf, another trace instance): stop that first",
            ) from exc
        registry.forget(group, event)

    def _buffers(self) -> builtins.list[Tracefs]:
        """The top-level buffer, this run's instances and stale runs' instances: where our events may be on."""
        buffers = [self.tracefs]
        for name in self._instance_names():
            run = instance_run(name)
            if run is not None and (run == lifetime.own_name() or lifetime.is_stale(run)):
                buffers.append(Tracefs(self.tracefs.path(f"instances/{name}")))
        return buffers

    def _instance_names(self) -> builtins.list[str]:
        return self.tracefs.listdir("instances")

    # -- cleanup -------------------------------------------------------------------------------

    def stale_events(self) -> builtins.list[DynamicEvent]:
        """Probes and synthetic events of dead runs."""
        return [e for e in self.list() if e.owner == STALE]

    def stale_groups(self) -> builtins.list[str]:
        """Probe groups of dead runs (synthetic events share one group with everyone's: not listed)."""
        return sorted({e.group for e in self.stale_events() if e.group != SYNTHETIC_GROUP})

    def stale_instances(self) -> builtins.list[str]:
        return [name for name in self._instance_names() if (run := instance_run(name)) and lifetime.is_stale(run)]

    def cleanup(self) -> tuple[builtins.list[str], builtins.list[DynamicEvent]]:
        """Remove what dead runs left: their triggers, then their instances (that disables events in
        them), then their probes and synthetic events (the kernel refuses those while a trigger is on),
        then the lock files of dead runs that left nothing (``lifetime``)."""
        instances = self.stale_instances()
        for name in instances:
            run = instance_run(name)
            if run is not None:  # always, for a stale instance: the name says whose it was
                remove_run_triggers(self.tracefs, name, run)
            try:
                os.rmdir(self.tracefs.path(f"instances/{name}"))
            except OSError as exc:
                raise UserError(f"cannot remove instance {name}: {exc.strerror}", "is something reading its trace_pipe?") from exc
        removed: list[DynamicEvent] = []
        for event in self.stale_events():
            self.delete(event)
            removed.append(event)
        left = {instance_run(name) for name in self._instance_names()}
        left |= {scoped_run(e.event) if e.group == SYNTHETIC_GROUP else e.group for e in self.list()}
        for name in lifetime.dead_runs():
            if name not in left:
                lifetime.forget(name)
        return instances, removed
