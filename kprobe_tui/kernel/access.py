"""What this user can do here, each with the reason it cannot: create probes, list them, tail, aggregate.

A user who cannot write tracefs still gets everything that can be read: browse functions and
source, build a probe and copy the command for an administrator, list the probes others made
when the event files are readable, and tail them when a trace instance can be made. Screens ask
for the ability they need (``access.can_tail``), never for a mode; lab mode is the name the UI
gives to "cannot create". The reason is said in plain words, naming the file that stops us
(``capabilities.denied``).

Which reader a tail gets is ``choose_reader``'s answer: our own trace instance when one can be made;
else the events sampled through perf_event_open, as ``perf record -e GROUP:EVENT -a`` would for this
user (kernel/perfevent.py), found by opening one event; else a refusal naming the set-ups an
administrator can choose, with their commands.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from kprobe_tui.errors import UserError
from kprobe_tui.kernel.capabilities import denied
from kprobe_tui.kernel.perfevent import denied_hint, paranoid, probe_permission
from kprobe_tui.kernel.perfpipe import find_perf, perf_refusal
from kprobe_tui.kernel.sources import KernelSources

# The files a probe is created through, in the order the kernel prefers them.
CONTROL_FILES = ("dynamic_events", "uprobe_events", "kprobe_events")
PERF_NAME = re.compile(r"[A-Za-z_]\w*")


@dataclass(frozen=True)
class Ability:
    """One thing this user can or cannot do here; ``why_not`` in plain words when it cannot."""

    allowed: bool
    why_not: str = ""

    def __bool__(self) -> bool:
        return self.allowed


ALLOWED = Ability(True)


def refused(why: str) -> Ability:
    return Ability(False, why)


@dataclass(frozen=True)
class Reader:
    """Which reader a tail gets here and why, in the words the app's title and ``doctor`` use."""

    kind: str  # "instance", "perf" (our perf_event_open), "perf-binary" (a perf record), or "" when there is none
    why: str
    hint: str = ""  # when there is none: the set-ups an administrator can choose
    perf: str = ""  # perf-binary: the perf that records

    @property
    def label(self) -> str:
        return {"instance": "trace instance", "perf": "perf_event_open (student reader)",
                "perf-binary": f"{self.perf} record (student reader)"}.get(self.kind, "none")


@dataclass(frozen=True)
class Access:
    can_create: Ability  # make, enable and delete probes (without it: lab mode, read-only)
    can_list: Ability  # read the dynamic events (an administrator's probes)
    can_tail: Ability  # record events: in a trace instance of our own, else sampled as perf does (``reader``)
    can_aggregate: Ability  # count/hist/latency: make run-scoped probes and record or trigger on them
    reader: Reader = Reader("", "")  # which reader a tail gets, and why

    def reader_note(self) -> str:
        """The reader in a few words, for the app's title when it is not our own instance."""
        return f"reading through {self.reader.label}" if self.reader.kind.startswith("perf") else ""

    def banner(self) -> str:
        return (f"LAB MODE: read-only — {self.can_create.why_not}. "
                "Build a probe and copy the command for an administrator.")


def decide(sources: KernelSources) -> Access:
    """What this user can do at start; a few stat and access calls, safe as any user."""
    tracefs = sources.tracefs
    if not sources.live:
        return _read_only(f"read-only snapshot of kernel {sources.release}", "a snapshot cannot be tailed",
                          "a snapshot's probes are not live")
    if tracefs is None:
        why = ("tracefs is not mounted and only root can mount it" if os.geteuid() != 0 else
               "tracefs is not mounted and could not be mounted")
        return _read_only(why, why, why)
    blocked = denied(tracefs, os.R_OK | os.X_OK)
    if blocked:
        return _read_only(blocked, blocked, blocked, choose_reader(tracefs))
    present = [tracefs / name for name in CONTROL_FILES if (tracefs / name).exists()]
    if not present:
        none = "there are no probe events"
        return _read_only("this kernel has no kprobe_events or uprobe_events (built without probe events)", none, none)
    reader = choose_reader(tracefs)
    tail_why = tail_denied(tracefs) or ""
    unlisted = denied(present[0], os.R_OK) or ""
    blocked = next(filter(None, (denied(path, os.W_OK) for path in present)), None) or tail_why
    if blocked:
        return _read_only(blocked, "" if reader.kind else tail_why, unlisted, reader)
    listed = refused(unlisted) if unlisted else ALLOWED
    return Access(can_create=ALLOWED, can_list=listed, can_tail=ALLOWED, can_aggregate=ALLOWED, reader=reader)


def tail_denied(tracefs: Path) -> str | None:
    """Why this user cannot tail here (a trace instance cannot be made), or None."""
    return denied(tracefs, os.R_OK | os.X_OK) or denied(tracefs / "instances", os.W_OK | os.X_OK)


def _read_only(create_why: str, tail_why: str, list_why: str, reader: Reader | None = None) -> Access:
    """Access of a user who cannot create probes (an aggregation makes its own, so it cannot either);
    an empty reason: that much is allowed."""
    return Access(can_create=refused(create_why), can_list=refused(list_why) if list_why else ALLOWED,
                  can_tail=refused(tail_why) if tail_why else ALLOWED,
                  can_aggregate=refused(f"an aggregation makes probes of its own, and {create_why}"),
                  reader=reader or Reader("", tail_why))


def choose_reader(tracefs: Path) -> Reader:
    """The reader this user's tail gets: a few stat calls; for a user without an instance, one event
    opened on one CPU and closed; if the kernel refuses that, one second-long ``perf record`` of it by the
    perf binary (set-up 2). Nothing is written anywhere."""
    tail_why = tail_denied(tracefs)
    if tail_why is None:
        return Reader("instance", f"{tracefs}/instances is writable: events are recorded in a trace instance of our own")
    event_dir, refusal = _follow_refusal(tracefs)
    if refusal is None:
        return Reader("perf", f"no trace instance ({tail_why}), but the kernel lets you sample tracepoints system-wide "
                              f"(kernel.perf_event_paranoid is {paranoid()}): events are read as perf record -a reads them")
    why = f"no trace instance ({tail_why}), and no sampling through perf_event_open ({refusal.message})"
    perf = find_perf()
    if event_dir is not None and perf is not None:
        perf_why = perf_refusal(perf, f"{event_dir.parent.name}/{event_dir.name}")
        if perf_why is None:
            return Reader("perf-binary", f"{why}, but {perf} may: events are read from its perf record -a", perf=perf)
        why = f"{why}, nor through {perf} ({perf_why})"
    return Reader("", why, refusal.hint or denied_hint())


def _follow_refusal(tracefs: Path) -> tuple[Path | None, UserError | None]:
    """The first event whose id this user can read, and why it cannot sample it (None: it can), found by opening it."""
    events = tracefs / "events"
    try:
        groups = sorted(entry.name for entry in os.scandir(events) if entry.is_dir())
    except OSError as exc:
        return None, UserError(f"cannot read {events}: {exc.strerror}", denied_hint())
    # perf's event parser takes only names that start as identifiers: "9p:9p_client_req", the first event of a
    # group-readable 6.1 tracefs, is an "event syntax error" to the perf binary it would be tried with
    for group in filter(PERF_NAME.fullmatch, groups):
        try:
            names = sorted(entry.name for entry in os.scandir(events / group) if entry.is_dir())
        except OSError:
            continue
        for name in filter(PERF_NAME.fullmatch, names):
            try:  # read, not access(2): that checks the real ids without capabilities (CAP_DAC_READ_SEARCH)
                (events / group / name / "id").read_bytes()
            except OSError:
                continue
            return events / group / name, probe_permission(events / group / name)
    return None, UserError(f"no event's id file under {events} is readable to you", denied_hint())
