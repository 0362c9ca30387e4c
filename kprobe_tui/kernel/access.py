"""Full or lab mode: whether this user can create probes here, and if not, why and what is left.

A user who cannot write tracefs still gets everything that can be read: browse functions and
source, build a probe and copy the command for an administrator, list the probes others made
when the event files are readable, and tail them when a trace instance can be made. The reason
is said in plain words, naming the file that stops us (``capabilities.denied``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from kprobe_tui.kernel.capabilities import denied
from kprobe_tui.kernel.sources import KernelSources

FULL = "full"
LAB = "lab"

# The files a probe is created through, in the order the kernel prefers them.
CONTROL_FILES = ("dynamic_events", "uprobe_events", "kprobe_events")


@dataclass(frozen=True)
class Access:
    mode: str  # FULL or LAB
    reason: str = ""  # why LAB, in plain words
    can_list: bool = False  # the dynamic events (an administrator's probes) are readable
    can_tail: bool = False  # a trace instance can be made and events enabled in it
    tail_reason: str = ""  # why tailing is not possible
    possible: list[str] = field(default_factory=list)  # what this user can still do, in plain words

    @property
    def lab(self) -> bool:
        return self.mode == LAB

    def banner(self) -> str:
        return f"LAB MODE: read-only — {self.reason}. Build a probe and copy the command for an administrator."


def decide(sources: KernelSources) -> Access:
    """The mode at start; a few stat and access calls, safe as any user."""
    tracefs = sources.tracefs
    if not sources.live:
        return _lab(f"read-only snapshot of kernel {sources.release}", "a snapshot cannot be tailed")
    if tracefs is None:
        why = ("tracefs is not mounted and only root can mount it" if os.geteuid() != 0 else
               "tracefs is not mounted and could not be mounted")
        return _lab(why, why)
    blocked = denied(tracefs, os.R_OK | os.X_OK)
    if blocked:
        return _lab(blocked, blocked)
    present = [tracefs / name for name in CONTROL_FILES if (tracefs / name).exists()]
    if not present:
        return _lab("this kernel has no kprobe_events or uprobe_events (built without probe events)",
                    "there are no probe events to tail")
    tail_why = tail_denied(tracefs) or ""
    can_list = not denied(present[0], os.R_OK)
    blocked = next(filter(None, (denied(path, os.W_OK) for path in present)), None) or tail_why
    if blocked:
        return _lab(blocked, tail_why, can_list)
    return Access(FULL, can_list=can_list, can_tail=True, possible=["everything: create, enable, delete and tail probes"])


def tail_denied(tracefs: Path) -> str | None:
    """Why this user cannot tail here (a trace instance cannot be made), or None."""
    return denied(tracefs, os.R_OK | os.X_OK) or denied(tracefs / "instances", os.W_OK | os.X_OK)


def _lab(reason: str, tail_reason: str, can_list: bool = False) -> Access:
    possible = ["browse functions and read source", "build a probe and copy the command for an administrator"]
    if can_list:
        possible.append("see the probes an administrator made")
    if not tail_reason:
        possible.append("tail them")
    return Access(LAB, reason, can_list, not tail_reason, tail_reason, possible)
