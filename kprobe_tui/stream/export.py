"""Write events to JSON lines or CSV, with a disk-full or permission failure as a UserError."""

from __future__ import annotations

import csv
import errno
import json
from collections.abc import Iterable
from pathlib import Path

from kprobe_tui.errors import UserError
from kprobe_tui.stream.parser import FAULT, Event

FORMATS = ("jsonl", "csv")
CSV_COLUMNS = ["time", "cpu", "comm", "pid", "tgid", "flags", "event", "site", "args"]


def export(events: Iterable[Event], path: Path, fmt: str) -> int:
    """Write ``events`` to ``path`` (jsonl or csv); returns how many were written."""
    if fmt not in FORMATS:
        raise UserError(f"unknown export format {fmt!r}", f"use one of: {', '.join(FORMATS)}")
    count = 0
    try:
        with open(path, "w", newline="") as out:
            if fmt == "jsonl":
                for event in events:
                    out.write(json.dumps(event.as_dict() if event.event else {"raw": event.body}) + "\n")
                    count += 1
            else:
                writer = csv.writer(out)
                writer.writerow(CSV_COLUMNS)
                for event in events:
                    args = " ".join(f"{k}={'(fault)' if v is FAULT else v}" for k, v in event.args.items())
                    writer.writerow([f"{event.ts:.6f}", event.cpu, event.comm, event.pid, event.tgid or "",
                                     event.flags, event.event, event.site, args])
                    count += 1
    except OSError as exc:
        hint = ("free some space or export somewhere else" if exc.errno in (errno.ENOSPC, errno.EDQUOT)
                else "choose a writable path")
        raise UserError(f"cannot export to {path}: {exc.strerror or exc}", hint) from exc
    return count
