"""Capture a kernel's tracing data into an archive, and open such an archive read-only.

Labs explore a server's kernel on a laptop this way, and the tests run on real data captured from
real kernels. Only what the readers use is kept: kallsyms text symbols, the ftrace list, the
blacklist, the tracefs README and probe files, and BTF.
"""

from __future__ import annotations

import atexit
import io
import json
import shutil
import tarfile
import tempfile
import time
from pathlib import Path

from kprobe_tui.errors import UserError
from kprobe_tui.kernel.sources import KernelSources

MANIFEST = "manifest.json"
TRACEFS_FILES = [
    "README",
    "available_filter_functions",
    "available_filter_functions_addrs",
    "kprobe_events",
    "uprobe_events",
    "dynamic_events",
]


def _text_symbols(kallsyms: Path) -> bytes:
    """Only text symbols: the catalog reads nothing else, and it keeps the archive small."""
    kept = [
        line for line in kallsyms.read_bytes().splitlines(keepends=True) if line.split(b" ", 2)[1:2] in ([b"t"], [b"T"])
    ]
    return b"".join(kept)


def capture(sources: KernelSources, out: Path, module_btf: bool = True) -> list[str]:
    """Write the archive; returns what could not be captured (file: reason)."""
    missing: list[str] = []
    members: dict[str, bytes] = {}

    def take(name: str, path: Path | None, transform=None) -> None:
        if path is None:
            missing.append(f"{name}: filesystem not mounted")
            return
        try:
            members[name] = transform(path) if transform else path.read_bytes()
        except FileNotFoundError:
            missing.append(f"{name}: not present on this kernel")
        except OSError as exc:
            missing.append(f"{name}: {exc.strerror or exc}")

    for name in TRACEFS_FILES:
        take(f"tracefs/{name}", sources.tracefs / name if sources.tracefs else None)
    take("debugfs/kprobes/blacklist", sources.blacklist)
    take("proc/kallsyms", sources.kallsyms, _text_symbols)
    take("btf/vmlinux", sources.btf_vmlinux)
    if module_btf and sources.btf_dir.is_dir():
        for path in sorted(sources.btf_dir.iterdir()):
            if path.name != sources.btf_name:
                take(f"btf/{path.name}", path)
    # The instances directory only matters for its presence (capabilities check for it).
    if sources.tracefs is not None and (sources.tracefs / "instances").is_dir():
        members["tracefs/instances/.present"] = b""
    if sources.tracefs is not None and (sources.tracefs / "error_log").exists():
        members["tracefs/error_log"] = b""
    manifest = {
        "release": _release(),
        "captured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "missing": missing,
    }
    members[MANIFEST] = json.dumps(manifest, indent=1).encode()
    mode = "w:xz" if out.name.endswith((".xz", ".txz")) else "w:gz"
    try:
        with tarfile.open(out, mode) as archive:
            for name, data in sorted(members.items()):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                info.mtime = int(time.time())
                archive.addfile(info, io.BytesIO(data))
    except OSError as exc:
        raise UserError(f"cannot write {out}: {exc.strerror or exc}") from exc
    return missing


def _release() -> str:
    try:
        return Path("/proc/sys/kernel/osrelease").read_text().strip()
    except OSError:
        return "unknown"


def open_snapshot(path: Path) -> KernelSources:
    """Unpack an archive into a private temporary directory and point the readers at it."""
    if not path.exists():
        raise UserError(f"snapshot {path} does not exist", "make one with: kprobe-tui snapshot OUT.tar.gz")
    root = Path(tempfile.mkdtemp(prefix="kprobe-tui-snapshot-"))
    atexit.register(shutil.rmtree, root, True)
    try:
        with tarfile.open(path) as archive:
            archive.extractall(root, filter="data")
        manifest = json.loads((root / MANIFEST).read_text())
    except (tarfile.TarError, OSError, ValueError, EOFError) as exc:
        raise UserError(
            f"{path} is not a readable kprobe-tui snapshot ({exc})", "capture a new one with: kprobe-tui snapshot OUT"
        ) from exc
    notes = [f"snapshot {path.name}: kernel {manifest.get('release', '?')}, captured {manifest.get('captured', '?')}"]
    notes.extend(f"not in the snapshot: {item}" for item in manifest.get("missing", []))
    debugfs = root / "debugfs"
    return KernelSources(
        tracefs=root / "tracefs",
        debugfs=debugfs if debugfs.is_dir() else None,
        kallsyms=root / "proc" / "kallsyms",
        btf_dir=root / "btf",
        live=False,
        notes=notes,
        release=manifest.get("release", ""),
    )
