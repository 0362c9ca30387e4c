"""What this kernel and this user allow, and what to do about the rest: one report for ``kprobe-tui doctor``
and the TUI's doctor screen."""

from __future__ import annotations

from pathlib import Path

from kprobe_tui.debuginfo.debuginfod import Client, setup_report
from kprobe_tui.debuginfo.locate import find_binary_debuginfo, running_kernel_build_id
from kprobe_tui.errors import UserError
from kprobe_tui.kernel import capabilities
from kprobe_tui.kernel.access import choose_reader
from kprobe_tui.kernel.sources import KernelSources
from kprobe_tui.machine import require_x86_64_elf
from kprobe_tui.textsafe import printable


def report(found: KernelSources, binary: str | None = None) -> str:
    """The capabilities, the debuginfod setup and, with ``binary``, whether that program can be probed."""
    parts = [capabilities.report(capabilities.detect(found))]
    if found.live and found.tracefs is not None:
        parts.append(reader_report(found.tracefs))
    # Whether a server has this kernel's debug info is asked of the running kernel only (one small request
    # to each server the user named), not of a snapshot's.
    parts.append("\n".join(setup_report(Client(), running_kernel_build_id() if found.live else None)))
    if binary:
        parts.append(binary_report(binary))
    return "\n\n".join(parts)


def reader_report(tracefs: Path) -> str:
    """Which reader a tail gets (our own instance, else perf_event_open as perf record -a, else none) and why."""
    reader = choose_reader(tracefs)
    lines = ["Events reader", f"  [{'ok' if reader.kind else '--'}] {reader.label:<35}  {reader.why}"]
    if reader.hint:
        lines.append(f"       to tail here, {reader.hint}")
    return printable("\n".join(lines), keep="\n")


def binary_report(binary: str) -> str:
    """Whether uprobes can go on a program, and whether its variables can be named (its DWARF)."""
    try:
        require_x86_64_elf(binary)
    except UserError as exc:
        return printable(f"-x {binary}: not probeable: {exc}", keep="\n")
    try:
        located = find_binary_debuginfo(binary, Client(offline=True))
    except UserError as exc:
        return printable(f"-x {binary}: probeable with uprobes, values through registers only: {exc}", keep="\n")
    where = "in the file itself" if located.debug_file == located.binary else f"in {located.debug_file}"
    build_id = f" (build-id {located.build_id})" if located.build_id else ""
    lines = [f"-x {located.binary}: probeable with uprobes; variables by name: debug info {where}{build_id}"]
    if located.note:
        lines.append(f"  note: {located.note}")
    return printable("\n".join(lines), keep="\n")
