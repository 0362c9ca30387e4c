"""Hist triggers in our trace instance and synthetic events: written, read, removed, cleaned up.

This module owns the ``trigger`` files of our instance and ``synthetic_events``. Everything it
writes is registered with ``lifetime.undo`` as it is made, so it goes when the run ends, newest
first: triggers that read a variable before the trigger defining it, every trigger before the
synthetic event it generates, and all of it before the instance and the probes (which the kernel
refuses to delete while a trigger is attached: EBUSY).

Ours are recognised by place and name, never by the look of a trigger: triggers on our run's
own events (group ``kptui_<pid>``) and on our synthetic events in our run's instances. A run's
synthetic events and its extra instances (one per aggregation: each has its own trace_pipe and
triggers) are named ``kptui_<pid>__<what>`` (``scoped_name``), so they are known as the run's
after it is gone. After SIGKILL, ``remove_run_triggers`` takes the run's triggers out of a dead
run's instance, in whatever order the kernel accepts, so the instance can be removed; other
triggers are left.
"""

from __future__ import annotations

import os
from kprobe_tui.errors import UserError
from kprobe_tui.kernel import lifetime
from kprobe_tui.kernel.tracefs import KernelRefused, Tracefs

SYNTHETIC_GROUP = "synthetic"
_SEPARATOR = "__"
_STATES = (" [active]", " [paused]")


def scoped_name(what: str, run: str | None = None) -> str:
    """A name that says which run made it: ``kptui_<pid>__<what>`` (synthetic events, extra instances)."""
    return f"{run or lifetime.run_name()}{_SEPARATOR}{what}"


def scoped_run(name: str) -> str | None:
    """The run a ``scoped_name`` belongs to, or None when it is not one of ours."""
    run, sep, _ = name.rpartition(_SEPARATOR)
    return run if sep and lifetime.is_run_scoped(run) else None


def trigger_lines(instance: Tracefs, group: str, event: str) -> list[str]:
    """The triggers on an event in an instance, as the kernel lists them (without [active])."""
    rel = f"events/{group}/{event}/trigger"
    if not instance.exists(rel):
        return []
    lines = []
    for line in instance.read(rel).splitlines():
        if line and not line.startswith("#"):
            for state in _STATES:
                line = line.removesuffix(state)
            lines.append(line)
    return lines


class Triggers:
    """Triggers on events of one instance, and synthetic event definitions, for this run."""

    def __init__(self, top: Tracefs, instance: Tracefs) -> None:
        self.top = top
        self.instance = instance

    def define_synthetic(self, name: str, definition: str) -> int:
        """``synthetic_events`` gets ``definition``; the undo token removes it."""
        if scoped_run(name) != lifetime.run_name():
            raise UserError(f"synthetic event {name!r} is not named for this run")
        if not self.top.exists("synthetic_events"):
            raise UserError("this kernel has no synthetic_events (CONFIG_SYNTH_EVENTS)", "use --engine user")
        self.top.write("synthetic_events", definition + "\n")
        return lifetime.undo.push(f"synthetic event {name}", lambda: self._remove_synthetic(name))

    def add(self, group: str, event: str, text: str) -> int:
        """Attach a trigger (appended: ``>`` would remove the others); the undo token removes it."""
        self.instance.write(f"events/{group}/{event}/trigger", text + "\n")
        return lifetime.undo.push(f"trigger on {group}/{event}", lambda: self._remove(group, event, text))

    def remove(self, token: int) -> None:
        lifetime.undo.run(token)

    def hist(self, group: str, event: str) -> str:
        return self.instance.read(f"events/{group}/{event}/hist")

    def _remove(self, group: str, event: str, text: str) -> None:
        try:
            self.instance.write(f"events/{group}/{event}/trigger", f"!{text}\n")
        except UserError:
            if text in trigger_lines(self.instance, group, event):
                raise
            # already gone (the instance or the event went first): nothing to undo

    def _remove_synthetic(self, name: str) -> None:
        try:
            self.top.write("synthetic_events", f"!{name}\n")
        except KernelRefused:
            if any(line.split()[:1] == [name] for line in self.top.read("synthetic_events").splitlines()):
                raise


def remove_run_triggers(top: Tracefs, instance_name: str, run: str) -> int:
    """Remove ``run``'s triggers from its instance (after SIGKILL); how many went.

    A trigger that reads another's variable must go first; rather than work out the order from
    the texts, every pass removes what the kernel lets go, until nothing is left or nothing moves.
    """
    instance = Tracefs(top.path(f"instances/{instance_name}"))
    owned = _owned_events(instance, run)
    pending = [(group, event, line) for group, event in owned for line in trigger_lines(instance, group, event)]
    removed = 0
    while pending:
        left = []
        for group, event, line in pending:
            try:
                instance.write(f"events/{group}/{event}/trigger", f"!{line}\n")
                removed += 1
            except UserError:
                left.append((group, event, line))
        if len(left) == len(pending):
            break
        pending = left
    return removed


def _owned_events(instance: Tracefs, run: str) -> list[tuple[str, str]]:
    found = []
    for group in (run, SYNTHETIC_GROUP):
        directory = instance.path(f"events/{group}")
        if not directory.is_dir():
            continue
        for event in sorted(os.listdir(directory)):
            if group == run or scoped_run(event) == run:
                found.append((group, event))
    return found

