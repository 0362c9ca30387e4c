"""Which persistent probes kprobe-tui made, told without trusting their group's name.

``kprobe-tui probe`` makes probes where ``perf probe`` would (group ``probe``, ``probe_<exe>``, or
any GROUP: a user names), and they outlive the run that made them. So ``list`` cannot mark them by
group, and a bare ``del 'work*'`` must not take perf's ``probe:work`` for ours. Each one made is
recorded here instead: one file per event, ``/run/kprobe-tui/made/<group>:<event>``, holding the
boot it was made in and the definition lines written to the kernel.

A record is only a claim; the kernel holds the truth. An event counts as ours while the kernel holds
it under that name with a definition we wrote (so a probe someone deleted and redefined by hand under
the same name is not ours), in the boot the record was made in (probes do not survive a reboot; /run
is a tmpfs that starts empty, and the boot id covers a /run that is not). A record that no longer
matches is removed when next seen.

Trust: the directory, and /run/kprobe-tui it is in, must be root's and not writable by others (see
lifetime.trusted_dir: anything else, a symlink or a ``made/`` another user made first, is warned
about on stderr and nothing is recorded there); a record counts only when it is a regular file owned
by root or by this user (a user who may not write tracefs could otherwise make root's bare ``del``
remove someone else's probe). A user who cannot write there (not root) makes probes without
records: ``list`` then shows them as anyone's, and ``del`` needs their group named.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from pathlib import Path

from kprobe_tui.files import write_atomic
from kprobe_tui.kernel import lifetime

_RECORD_DIR_NAME = "made"  # in lifetime.LOCK_DIR
MAX_RECORD = 64 * 1024  # a few definition lines; anything bigger is not ours
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HEX = re.compile(r"0x([0-9a-fA-F]+)")


def normal(definition: str) -> str:
    """A definition line as the kernel would show it back: words single-spaced, hex numbers without
    padding (uprobe_events shows ``/bin/prog:0x000000000000113b`` for ``/bin/prog:0x113b``), and a
    fetch-arg written without a name (perf's ``%di``, ``$retval``) named as the kernel names it, argN."""
    words = [_HEX.sub(lambda m: f"0x{int(m[1], 16):x}", word) for word in definition.split()]
    return " ".join(words[:2] + [word if "=" in word else f"arg{n}={word}" for n, word in enumerate(words[2:], 1)])


def record(group: str, event: str, definitions: Iterable[str]) -> None:
    """Note that we wrote these definition lines for group/event (appended to an existing record)."""
    if not (_NAME.fullmatch(group) and _NAME.fullmatch(event)):
        return  # names we validated ourselves always are; anything else is not written to a path
    directory = _directory(create=True)
    if directory is None:
        return
    path = directory / f"{group}:{event}"
    lines = _read(path) or []
    lines += [normal(line) for line in definitions if normal(line) not in lines]
    data = json.dumps({"boot": lifetime.boot_id(), "definitions": lines}).encode()
    try:
        write_atomic(path, lambda stream: stream.write(data), replace=True, what="probe record")
    except Exception:  # a record we cannot write makes the probe look like anyone's, nothing worse
        return


def forget(group: str, event: str) -> None:
    """The event is gone (deleted by us): its record goes too."""
    directory = _directory()
    if directory is not None and _NAME.fullmatch(group) and _NAME.fullmatch(event):
        try:
            os.unlink(directory / f"{group}:{event}")
        except OSError:
            pass


def ours(events, listed_at: float) -> set[str]:
    """The full names (``group/event``) of those of ``events`` (DynamicEvents, as the kernel held them at
    ``listed_at``, a time.time()) that kprobe-tui made. Records of events the kernel no longer holds as
    written are removed, if older than that listing (a probe made since is not in it yet)."""
    directory = _directory()
    if directory is None:
        return set()
    held: dict[tuple[str, str], set[str]] = {}
    for event in events:
        held.setdefault((event.group, event.event), set()).update(normal(line) for line in event.definitions)
    found = set()
    try:
        entries = os.listdir(directory)
    except OSError:
        return set()
    for entry in entries:
        group, _, name = entry.partition(":")
        if not (_NAME.fullmatch(group) and _NAME.fullmatch(name)):
            continue
        lines = _read(directory / entry)
        shown = held.get((group, name))
        if shown is not None and lines is not None and shown & set(lines):
            found.add(f"{group}/{name}")
        elif (lines is not None or shown is None) and _older(directory / entry, listed_at):
            forget(group, name)  # the kernel holds no such event, or one we did not write
    return found


def _older(path: Path, moment: float) -> bool:
    try:
        return os.lstat(path).st_mtime < moment
    except OSError:
        return False


def _read(path: Path) -> list[str] | None:
    """A trusted record's definition lines of this boot; None for anything else."""
    data = lifetime.read_record(path, MAX_RECORD, (0, os.geteuid()))
    lines = data.get("definitions") if data is not None else None
    return [line for line in lines if isinstance(line, str)] if isinstance(lines, list) else None


def _directory(create: bool = False) -> Path | None:
    """/run/kprobe-tui/made when only root writes it (made by root on first use); None for a user who
    cannot write it when ``create``."""
    root = lifetime.root_dir(create)
    if root is None:
        return None
    directory = lifetime.trusted_dir(root / _RECORD_DIR_NAME, 0, "records of the probes kprobe-tui makes",
                                     create=create and os.geteuid() == 0)
    if directory is None or (create and not os.access(directory, os.W_OK)):
        return None
    return directory
