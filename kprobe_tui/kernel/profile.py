"""Hit and miss counts of probes, from tracefs ``kprobe_profile`` and ``uprobe_profile``.

The kernel prints one line per probe: ``kprobe_profile`` has ``EVENT HITS MISSES`` and
``uprobe_profile`` has ``FILE EVENT HITS`` (uprobes have no miss count). Neither names the
group, so a line is matched to its probe by order: both profile files and their control files
(``kprobe_events``, ``uprobe_events``) walk the kernel's one list of dynamic events. fprobes,
eprobes and synthetic events have no profile.
"""

from __future__ import annotations

from dataclasses import dataclass

from kprobe_tui.errors import UserError
from kprobe_tui.kernel.events import parse_definition
from kprobe_tui.kernel.tracefs import Tracefs

# (profile file, control file, whose probes)
_PROFILES = (("kprobe_profile", "kprobe_events", False), ("uprobe_profile", "uprobe_events", True))


@dataclass(frozen=True)
class ProbeHits:
    event: str  # the event name only: the kernel prints no group
    hits: int
    misses: int | None  # None for uprobes: the kernel does not count them
    file: str | None = None  # the probed binary, for uprobes


def parse_kprobe_profile(text: str) -> list[ProbeHits]:
    """``  EVENT  HITS  MISSES`` lines, in the kernel's order; unreadable lines are skipped."""
    found = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
            found.append(ProbeHits(parts[0], int(parts[1]), int(parts[2])))
    return found


def parse_uprobe_profile(text: str) -> list[ProbeHits]:
    """``  FILE EVENT  HITS`` lines; the file name may hold spaces, so it is what precedes the last two."""
    found = []
    for line in text.splitlines():
        parts = line.strip().rsplit(None, 2)
        if len(parts) == 3 and parts[2].isdigit():
            found.append(ProbeHits(parts[1], int(parts[2]), None, parts[0]))
    return found


def attribute(entries: list[ProbeHits], names: list[tuple[str, str]]) -> dict[str, ProbeHits]:
    """``group/event`` -> counts, matching profile lines to ``(group, event)`` in control-file order.

    Same-named events in two groups are told apart by position, and the probes of one event are summed;
    a probe added or removed between the two reads is skipped over rather than given another's counts.
    """
    counts: dict[str, ProbeHits] = {}
    start = 0
    for entry in entries:
        for index in range(start, len(names)):
            group, event = names[index]
            if event == entry.event:  # an event of several probes (a line's addresses): their sum
                before = counts.get(f"{group}/{event}")
                counts[f"{group}/{event}"] = entry if before is None else ProbeHits(
                    event, before.hits + entry.hits, None if entry.misses is None else (before.misses or 0) + entry.misses,
                    entry.file)
                start = index + 1
                break
    return counts


def read_hits(tracefs: Tracefs) -> dict[str, ProbeHits]:
    """Counts of every kprobe and uprobe this user may read, by ``group/event``."""
    counts: dict[str, ProbeHits] = {}
    for profile, control, is_uprobe in _PROFILES:
        try:
            if not (tracefs.exists(profile) and tracefs.exists(control)):
                continue
            definitions = tracefs.read(control).splitlines()
            text = tracefs.read(profile)
        except UserError:
            continue  # not readable for this user: those probes show no counts
        parsed = [parse_definition(line, is_uprobe) for line in definitions]
        names = [(event.group, event.event) for event in parsed if event is not None]
        parse = parse_uprobe_profile if is_uprobe else parse_kprobe_profile
        counts.update(attribute(parse(text), names))
    return counts


def rates(before: dict[str, ProbeHits], after: dict[str, ProbeHits], seconds: float) -> dict[str, float]:
    """Hits per second between two readings of the probes in both; a probe recreated meanwhile (its
    count went down) counts from zero."""
    if seconds <= 0:
        return {}
    per_second = {}
    for name, now in after.items():
        then = before.get(name)
        if then is not None:
            per_second[name] = (now.hits - (then.hits if then.hits <= now.hits else 0)) / seconds
    return per_second
