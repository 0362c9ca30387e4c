"""Capture a kernel's tracing data into an archive, and open such an archive read-only.

Labs explore a server's kernel on a laptop this way, and the tests run on real data captured from
real kernels. Only what the readers use is kept: kallsyms text symbols, the ftrace list, the
blacklist, the tracefs README and probe files, and BTF.

An archive may come from someone else's machine, so opening one trusts nothing in it: only the
members the readers use are taken, each a regular file under a name we expect (no links, devices
or paths of its own), every size bounded (a member, the total, the count: a small archive can
expand to gigabytes), and the manifest and kallsyms are checked before any reader sees them.
The archive holds the kernel's real addresses: it is written 0600, atomically, never over a file
unless asked.
"""

from __future__ import annotations

import gzip
import io
import json
import lzma
import os
import re
import shutil
import tarfile
import tempfile
import time
import zlib
from pathlib import Path
from typing import Literal

from kprobe_tui.errors import UserError
from kprobe_tui.files import MiB, NoSuchFile, open_regular, read_regular, write_atomic
from kprobe_tui.kernel import lifetime
from kprobe_tui.kernel.paths import KernelSources

__all__ = ["capture"]

MANIFEST = "manifest.json"
TRACEFS_FILES = [
    "README",
    "available_filter_functions",
    "available_filter_functions_addrs",
    "kprobe_events",
    "uprobe_events",
    "dynamic_events",
]
# Bounds on what an archive may hold. A real one (Debian 6.12, all module BTF) is ~15 MB unpacked in
# ~150 members, the largest (kallsyms text symbols, vmlinux BTF) ~5 MB each.
MAX_MEMBER = 64 * MiB
MAX_TOTAL = 256 * MiB
MAX_MEMBERS = 10000
# The members a snapshot is read for, and nothing else (other names are skipped, not unpacked). A BTF
# file is vmlinux's or a module's, named as the module (MODULE_NAME_LEN: at most 55 characters of
# [A-Za-z0-9_-]); any other name, one too long for the filesystem included, is not one the kernel gave.
_MEMBER_NAMES = re.compile(
    r"manifest\.json|tracefs/(?:" + "|".join(map(re.escape, TRACEFS_FILES)) + r"|error_log|instances/\.present)"
    r"|debugfs/kprobes/blacklist|proc/kallsyms|btf/[A-Za-z0-9_-]{1,55}", re.ASCII
)
_MANIFEST_FIELDS = {"release": str, "captured": str, "missing": list}


class CorruptSnapshot(ValueError):
    """What is wrong with an archive's contents (the caller names the archive)."""


def _text_symbols(kallsyms: Path) -> bytes:
    """Only text symbols: the catalog reads nothing else, and it keeps the archive small."""
    data = read_regular(kallsyms, "kallsyms file", MAX_TOTAL)
    kept = [line for line in data.splitlines(keepends=True) if line.split(b" ", 2)[1:2] in ([b"t"], [b"T"])]
    return b"".join(kept)


def capture(sources: KernelSources, out: Path, module_btf: bool = True, replace: bool = False) -> list[str]:
    """Write the archive (``replace``: over an existing file); returns what could not be captured (file: reason)."""
    missing: list[str] = []
    members: dict[str, bytes] = {}

    def take(name: str, path: Path | None, transform=None) -> None:
        if path is None:
            missing.append(f"{name}: filesystem not mounted")
            return
        try:
            members[name] = transform(path) if transform else read_regular(path, name, MAX_MEMBER)
        except NoSuchFile:
            missing.append(f"{name}: not present on this kernel")
        except UserError as exc:
            missing.append(exc.message)

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
    mode: Literal["w:xz", "w:gz"] = "w:xz" if out.name.endswith((".xz", ".txz")) else "w:gz"

    def write(stream) -> None:
        with tarfile.open(out.name, mode, fileobj=stream) as archive:
            for name, data in sorted(members.items()):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                info.mtime = int(time.time())
                info.mode = 0o600
                archive.addfile(info, io.BytesIO(data))

    try:
        write_atomic(out, write, replace=replace, what="snapshot")
    except OSError as exc:
        raise UserError(f"cannot write {out}: {exc.strerror or exc}", "the old file, if any, is unchanged") from exc
    return missing


def _release() -> str:
    try:
        return Path("/proc/sys/kernel/osrelease").read_text().strip()
    except OSError:
        return "unknown"


def open_snapshot(path: Path) -> KernelSources:
    """Unpack an archive into a private temporary directory (removed however the run ends) and point
    the readers at it."""
    root = Path(tempfile.mkdtemp(prefix="kprobe-tui-snapshot-"))
    removal = lifetime.undo.push(f"the unpacked snapshot {root}", lambda: shutil.rmtree(root, ignore_errors=True))
    try:
        with open_regular(path, "snapshot") as stream:
            unpack(stream, root)
        manifest = read_manifest(root)
        _check_kallsyms(root)
    except (CorruptSnapshot, tarfile.TarError, EOFError, gzip.BadGzipFile, lzma.LZMAError, zlib.error) as exc:
        lifetime.undo.run(removal)
        raise UserError(f"snapshot {path} is corrupt: {exc}", "capture a new one with: kprobe-tui snapshot OUT") from None
    except BaseException:
        lifetime.undo.run(removal)
        raise
    notes = [f"snapshot {path.name}: kernel {manifest['release']}, captured {manifest['captured']}"]
    notes.extend(f"not in the snapshot: {item}" for item in manifest["missing"])
    debugfs = root / "debugfs"
    return KernelSources(
        tracefs=root / "tracefs",
        debugfs=debugfs if debugfs.is_dir() else None,
        kallsyms=root / "proc" / "kallsyms",
        btf_dir=root / "btf",
        live=False,
        notes=notes,
        release=manifest["release"],
    )


class _Bounded(io.RawIOBase):
    """A stream that refuses to yield more than ``limit`` bytes: tarfile reads some headers (long
    names, pax records) whole into memory, so the bound is on everything decompressed."""

    def __init__(self, stream, limit: int) -> None:
        self.stream = stream
        self.left = limit

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self.stream.read(min(len(buffer), self.left + 1))
        if len(data) > self.left:
            raise CorruptSnapshot(f"it unpacks to more than {MAX_TOTAL // MiB} MiB")
        self.left -= len(data)
        buffer[: len(data)] = data
        return len(data)


def _decompressed(stream: io.BufferedReader):
    """The tar stream inside a .tar.gz or .tar.xz (what ``snapshot`` writes)."""
    magic = stream.peek(6)[:6]
    if magic.startswith(b"\x1f\x8b"):
        return gzip.GzipFile(fileobj=stream, mode="rb")
    if magic.startswith(b"\xfd7zXZ\x00"):
        return lzma.LZMAFile(stream, "rb")
    raise CorruptSnapshot("not a .tar.gz or .tar.xz archive")


def unpack(stream, root: Path) -> None:
    """Extract the members a snapshot is read for into ``root`` (a fresh directory of ours), in one
    streaming pass, with our own checks rather than tarfile's extraction filters (Python 3.11.2, what
    Debian 12 ships, has none)."""
    tar_stream = io.BufferedReader(_Bounded(_decompressed(stream), MAX_TOTAL + MAX_MEMBERS * 1024))
    count = total = 0
    with tarfile.open(fileobj=tar_stream, mode="r|") as archive:
        for member in archive:
            count += 1
            if count > MAX_MEMBERS:
                raise CorruptSnapshot(f"more than {MAX_MEMBERS} members")
            if not _MEMBER_NAMES.fullmatch(member.name):
                continue  # not something a reader uses: never written to disk
            if not member.isreg():
                raise CorruptSnapshot(f"{member.name!r} is not a regular file (links and devices are refused)")
            if member.size > MAX_MEMBER:
                raise CorruptSnapshot(f"{member.name!r} is larger than {MAX_MEMBER // MiB} MiB")
            total += member.size
            if total > MAX_TOTAL:
                raise CorruptSnapshot(f"it unpacks to more than {MAX_TOTAL // MiB} MiB")
            target = root / member.name
            target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            source = archive.extractfile(member)
            assert source is not None  # regular files only reach here: each has its contents
            try:
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            except FileExistsError:
                raise CorruptSnapshot(f"{member.name!r} appears twice") from None
            with os.fdopen(fd, "wb") as out:
                shutil.copyfileobj(source, out)


def read_manifest(root: Path) -> dict:
    """The manifest, checked: a dict with the fields and types ``snapshot`` writes."""
    try:
        manifest = json.loads((root / MANIFEST).read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise CorruptSnapshot(f"it has no {MANIFEST}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise CorruptSnapshot(f"{MANIFEST} is not JSON ({exc})") from None
    except RecursionError:  # json's parser recurses per nesting level: [[[[... is a few bytes a level
        raise CorruptSnapshot(f"{MANIFEST} is nested deeper than Python's JSON reader can follow") from None
    if not isinstance(manifest, dict):
        raise CorruptSnapshot(f"{MANIFEST} holds a {type(manifest).__name__}, not an object")
    for field, kind in _MANIFEST_FIELDS.items():
        if not isinstance(manifest.get(field), kind):
            found = "missing" if field not in manifest else f"a {type(manifest[field]).__name__}"
            raise CorruptSnapshot(f"{MANIFEST}: {field!r} is {found}, not a {kind.__name__}")
    if not all(isinstance(item, str) for item in manifest["missing"]):
        raise CorruptSnapshot(f"{MANIFEST}: 'missing' holds something other than strings")
    return manifest


def _check_kallsyms(root: Path) -> None:
    """Kernel symbol names are ASCII: a kallsyms that is not even UTF-8 is not one the kernel wrote."""
    path = root / "proc" / "kallsyms"
    if not path.exists():
        return
    try:
        path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptSnapshot(f"proc/kallsyms is not text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start})") from None
