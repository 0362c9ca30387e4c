"""Where the kernel's files are: live, or captured copies.

Every reader in kprobe-tui goes through a ``KernelSources``: on a live machine it points at the
mounted tracefs, debugfs, ``/proc/kallsyms`` and ``/sys/kernel/btf``; offline it points at
captured copies (``--tracefs DIR`` and friends, or a ``kprobe-tui snapshot`` archive).
"""

from __future__ import annotations

import os
from pathlib import Path

from kprobe_tui.files import open_regular
from kprobe_tui.kernel.paths import DEFAULT_BTF_DIR, DEFAULT_DEBUGFS, DEFAULT_KALLSYMS, DEFAULT_TRACEFS
from kprobe_tui.kernel.paths import KernelSources as KernelSources  # where every reader imports it from

__all__ = ["KernelSources", "from_args", "locate"]


def _mount_points(mounts_file: Path = Path("/proc/mounts")) -> dict[str, Path]:
    """First mount point of each of tracefs and debugfs, from /proc/mounts."""
    found: dict[str, Path] = {}
    try:
        text = mounts_file.read_text()
    except OSError:
        return found
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[2] in ("tracefs", "debugfs"):
            found.setdefault(parts[2], Path(parts[1].replace("\\040", " ")))
    return found


def _mount(fstype: str, target: Path, without_it: str, notes: list[str]) -> Path | None:
    """Mount ``fstype`` on ``target`` (root only); the mount point, or None with a note saying why not."""
    if not target.is_dir():
        return None
    if os.geteuid() != 0:
        reason: str | None = "not root"
    else:
        import subprocess  # only when tracefs is not mounted yet (~4 ms of imports otherwise)

        try:
            result = subprocess.run(
                ["mount", "-t", fstype, "nodev", str(target)], capture_output=True, text=True, timeout=10
            )
            reason = None if result.returncode == 0 else (result.stderr.strip() or f"mount exited {result.returncode}")
        except (OSError, subprocess.TimeoutExpired) as exc:
            reason = str(exc)
    if reason is None:
        notes.append(f"mounted {fstype} at {target}")
        return target
    notes.append(f"{fstype} is not mounted ({reason}){without_it}")
    return None


def locate(mount: bool = True) -> KernelSources:
    """Find tracefs and debugfs on this machine, mounting them when root and they are missing."""
    notes: list[str] = []
    mounts = _mount_points()
    debugfs = mounts.get("debugfs")
    if debugfs is None and mount:
        debugfs = _mount("debugfs", DEFAULT_DEBUGFS, ": the kprobe blacklist cannot be read", notes)
    tracefs = mounts.get("tracefs")
    if tracefs is None and mount:
        tracefs = _mount("tracefs", DEFAULT_TRACEFS, "", notes)
    # Old kernels only have tracing under debugfs (os.path.exists: False, not an error, without access).
    if tracefs is None and debugfs is not None and os.path.exists(debugfs / "tracing" / "README"):
        tracefs = debugfs / "tracing"
    return KernelSources(tracefs, debugfs, DEFAULT_KALLSYMS, DEFAULT_BTF_DIR, live=True, notes=notes)


def from_args(args) -> KernelSources:
    """The sources the command line asks for: a snapshot, explicit copies, or the live kernel."""
    if getattr(args, "snapshot", None):
        from kprobe_tui.kernel.snapshot import open_snapshot  # only for --snapshot: tarfile, lzma, json stay unloaded

        return open_snapshot(Path(args.snapshot))
    overrides = {
        name: getattr(args, name, None) for name in ("tracefs", "debugfs", "kallsyms", "btf")
    }
    if not any(overrides.values()):
        return locate()
    for name in ("kallsyms", "btf"):  # a FIFO or a device here would hang or never end a reader: say so now
        given = overrides[name]
        if given:
            open_regular(given, f"--{name} file").close()
    live = locate(mount=False) if not overrides["tracefs"] else None
    btf = Path(overrides["btf"]) if overrides["btf"] else DEFAULT_BTF_DIR / "vmlinux"
    return KernelSources(
        tracefs=Path(overrides["tracefs"]) if overrides["tracefs"] else (live.tracefs if live else None),
        debugfs=Path(overrides["debugfs"]) if overrides["debugfs"] else (live.debugfs if live else None),
        kallsyms=Path(overrides["kallsyms"]) if overrides["kallsyms"] else DEFAULT_KALLSYMS,
        btf_dir=btf.parent,
        btf_name=btf.name,
        live=False,
        release="offline copies",
    )
