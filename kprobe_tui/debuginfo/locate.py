"""Where the debug info and the source text are.

User binaries: the file itself, its .gnu_debuglink (beside it, in .debug/, under /usr/lib/debug,
with the link's CRC checked), its build-id under /usr/lib/debug/.build-id, else debuginfod. The
kernel: an explicit vmlinux, else the usual distribution paths, each checked against the running
kernel's build-id, else debuginfod. Kernel modules are found in ``modules``. DWARF split by dwz
refers into a shared supplementary file (.gnu_debugaltlink): it is found the same way, by its
build-id, and must be found, or types and variables would be missing.

debuginfod is asked only when the files on disk fall short and DEBUGINFOD_URLS names servers.

The ELF section table is read with our own reader (kprobe_tui.elf), not pyelftools: a warm query
answered from the index never needs pyelftools, and importing it is ~20 ms, a fifth of such a run.
"""

from __future__ import annotations

import os
import shutil
import zlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

from kprobe_tui.debuginfo.elfsections import ElfSections as ElfSections  # where the engine and tests ask
from kprobe_tui.debuginfo.elfsections import gnu_build_id
from kprobe_tui.elf import NotElf
from kprobe_tui.errors import UserError
from kprobe_tui.files import open_regular
from kprobe_tui.machine import require_x86_64_elf

if TYPE_CHECKING:
    from collections.abc import Callable

    from kprobe_tui.debuginfo.debuginfod import Client

    # A Client, or what makes one when it is first needed: most runs find everything on disk and
    # never pay for importing the client (urllib, ssl).
    Debuginfod: TypeAlias = Client | Callable[[], Client] | None

__all__ = ["ElfSections", "find_binary_debuginfo", "find_vmlinux", "running_kernel_build_id", "snapshot_debug_hint"]

DEBUG_ROOT = Path("/usr/lib/debug")
KERNEL_NOTES = Path("/sys/kernel/notes")

KERNEL_PACKAGE_HINT = (
    "install the kernel's debug symbols: Debian `apt-get install linux-image-{r}-dbg`, "
    "Ubuntu `apt-get install linux-image-{r}-dbgsym`, Fedora `dnf debuginfo-install kernel-debuginfo`, "
    "set DEBUGINFOD_URLS to your distribution's debuginfod server, "
    "or pass -k VMLINUX. Without them, BTF still allows entry probes with typed arguments."
)


@dataclass(frozen=True)
class LocatedDebugInfo:
    """The file holding the DWARF, and the binary the probes go on (the same file when unstripped)."""

    debug_file: Path
    binary: Path | None  # None for the kernel
    build_id: str | None
    note: str = ""  # something the user should know (e.g. a vmlinux not matching the running kernel)
    supplementary: Path | None = None  # the dwz file the DWARF refers into (.gnu_debugaltlink)
    module: str | None = None  # a kernel module's name: its probes are placed as MODULE:func+off

    @property
    def is_kernel(self) -> bool:
        return self.binary is None


def running_kernel_build_id(notes_file: Path = KERNEL_NOTES) -> str | None:
    """The running kernel's build-id from /sys/kernel/notes (raw ELF notes)."""
    try:
        return gnu_build_id(notes_file.read_bytes(), "<", 4)
    except OSError:
        return None


def read_elf(path: Path, hint: str) -> ElfSections:
    """The sections of a file the user named, or a UserError saying why it cannot be read."""
    try:
        return ElfSections(path)
    except NotElf as exc:
        raise UserError(f"{path}: not an ELF file ({exc})", hint) from exc
    except OSError as exc:
        raise UserError(f"{path}: cannot read it ({exc.strerror})", "check the file's permissions") from exc


def has_dwarf(path: Path) -> bool:
    try:
        return ElfSections(path).has_dwarf
    except (OSError, NotElf, UserError):
        return False


def _crc_matches(path: Path, crc: int) -> bool:
    value = 0
    with open(path, "rb") as stream:
        while chunk := stream.read(1 << 20):
            value = zlib.crc32(chunk, value)
    return value == crc


def find_binary_debuginfo(binary: str, debuginfod: Debuginfod = None) -> LocatedDebugInfo:
    """The DWARF for a user program or library, or a UserError saying where it was looked for."""
    path = Path(binary)
    if not path.exists() and "/" not in binary:
        found = shutil.which(binary)
        path = Path(found) if found else path
    if not path.exists():
        raise UserError(f"{binary}: no such file", "give the path of the program or library to probe (-x PATH)")
    path = path.resolve()
    require_x86_64_elf(path)
    elf = read_elf(path, "-x takes a compiled program or shared library")
    build_id = elf.build_id()
    link = elf.debuglink()
    if elf.has_dwarf:
        return with_supplementary(LocatedDebugInfo(path, path, build_id), elf, debuginfod)
    looked: list[str] = []
    if link:
        name, crc = link
        for candidate in (path.parent / name, path.parent / ".debug" / name,
                          DEBUG_ROOT / path.parent.relative_to("/") / name):
            looked.append(str(candidate))
            if candidate.is_file() and _crc_matches(candidate, crc) and has_dwarf(candidate):
                return with_supplementary(LocatedDebugInfo(candidate, path, build_id), ElfSections(candidate), debuginfod)
    if build_id:
        candidate = build_id_path(build_id)
        looked.append(str(candidate))
        if candidate.is_file() and has_dwarf(candidate):
            return with_supplementary(LocatedDebugInfo(candidate, path, build_id), ElfSections(candidate), debuginfod)
        remote = fetch_debuginfo(build_id, debuginfod, looked)
        if remote is not None:
            file, note = remote
            return with_supplementary(LocatedDebugInfo(file, path, build_id, note), ElfSections(file), debuginfod)
    where = ", ".join(looked) or "nowhere else (no .gnu_debuglink, no build-id)"
    raise UserError(
        f"{path}: no DWARF debug info (looked in the file itself, {where})",
        "install its debug symbols (Debian: the matching -dbgsym package, Fedora: dnf debuginfo-install), "
        "set DEBUGINFOD_URLS to your distribution's debuginfod server, or rebuild it with -g",
    )


def build_id_path(build_id: str) -> Path:
    """Where distributions install a build-id's debug file (gdb's and elfutils' debug-file-directory)."""
    return DEBUG_ROOT / ".build-id" / build_id[:2] / f"{build_id[2:]}.debug"


def default_client(debuginfod: Debuginfod) -> Client:
    """The caller's client (or the one its factory makes), else one from the environment (quiet: no progress)."""
    if callable(debuginfod):
        return debuginfod()
    if debuginfod is not None:
        return debuginfod
    from kprobe_tui.debuginfo.debuginfod import Client  # here, not above: the client module costs ~8 ms to import (-X importtime) and most runs never ask it

    return Client()


def fetch_debuginfo(build_id: str, debuginfod: Debuginfod, looked: list[str]) -> tuple[Path, str] | None:
    """The build-id's debug file from debuginfod and a note on the download, or None when DEBUGINFOD_URLS
    is unset. A server's refusal is added to ``looked`` (the caller's message says where it looked)."""
    from kprobe_tui.debuginfo.debuginfod import Cancelled  # here, not above: the client module costs ~8 ms to import (-X importtime) and most runs never ask it

    client = default_client(debuginfod)
    if not client.enabled and client.cached(build_id) is None:
        return None
    fetched = len(client.downloads)
    try:
        path = client.debuginfo(build_id)
    except Cancelled:
        raise
    except UserError as exc:
        looked.append(f"debuginfod ({exc.message})")
        return None
    return path, _download_note(client, fetched)


def _download_note(client: Client, before: int) -> str:
    if len(client.downloads) == before:
        return ""
    from kprobe_tui.debuginfo.debuginfod import (
        human_size,  # here, not above: the client module costs ~8 ms to import (-X importtime) and most runs never ask it
    )

    url, path, size, seconds = client.downloads[-1]
    return f"downloaded {url} ({human_size(size)} in {seconds:.1f} s) into {path}"


def with_supplementary(located: LocatedDebugInfo, elf: ElfSections, debuginfod: Debuginfod) -> LocatedDebugInfo:
    """``located`` with its dwz supplementary file, when its DWARF has one (else unchanged)."""
    link = elf.altlink()
    if link is None:
        return located
    name, build_id = link
    directory = located.debug_file.parent
    candidates = [Path(name)] if name.startswith("/") else [directory / name, located.debug_file.resolve().parent / name]
    if build_id:
        candidates.append(build_id_path(build_id))
    looked: list[str] = []
    for candidate in dict.fromkeys(candidates):
        looked.append(str(candidate))
        try:
            if candidate.is_file() and (not build_id or ElfSections(candidate).build_id() == build_id):
                return _replace(located, supplementary=candidate)
        except (OSError, NotElf):
            continue
    remote = fetch_debuginfo(build_id, debuginfod, looked) if build_id else None
    if remote is not None:
        file, note = remote
        notes = "; ".join(filter(None, (located.note, note)))
        return _replace(located, supplementary=file, note=notes)
    raise UserError(
        f"{located.debug_file}: its DWARF was shared out by dwz into {name} (build-id {build_id or 'unknown'}), "
        f"which is not found (looked in {', '.join(looked)})",
        "install the package's debug symbols completely (the .dwz file comes with them), "
        "or set DEBUGINFOD_URLS to a debuginfod server that has it",
    )


def _replace(located: LocatedDebugInfo, **changes) -> LocatedDebugInfo:
    return replace(located, **changes)


def snapshot_debug_hint(release: str) -> str:
    """What to give for the source of a kernel that is not the running one (a snapshot's)."""
    return (f"pass -k with kernel {release}'s debug vmlinux (Debian's linux-image-{release}-dbg installs it as "
            f"/usr/lib/debug/boot/vmlinux-{release}; elsewhere: its debuginfod server, by the snapshot's build-id)")


def kernel_candidates(release: str) -> list[Path]:
    """The usual places distributions put a debug vmlinux, in the order they are tried."""
    return [
        DEBUG_ROOT / "boot" / f"vmlinux-{release}",
        DEBUG_ROOT / "lib" / "modules" / release / "vmlinux",
        Path("/boot") / f"vmlinux-{release}",
        Path("/lib/modules") / release / "build" / "vmlinux",
    ]


def find_vmlinux(vmlinux: str | None = None, release: str | None = None,
                 debuginfod: Debuginfod = None) -> LocatedDebugInfo:
    """An explicit vmlinux (any kernel: offline analysis), else one matching the running kernel."""
    release = release or os.uname().release
    running = running_kernel_build_id()
    if vmlinux is not None:
        path = Path(vmlinux)
        if not path.exists():
            raise UserError(f"{vmlinux}: no such file", "-k takes the path of a vmlinux with debug info")
        open_regular(path, "-k file").close()  # a FIFO or a device: said now, not a hang
        elf = read_elf(path, "-k takes the path of a vmlinux with debug info")
        if not elf.has_dwarf:
            raise UserError(f"{vmlinux}: has no DWARF debug info", KERNEL_PACKAGE_HINT.format(r=release))
        build_id = elf.build_id()
        note = ""
        if running and build_id and build_id != running:
            note = f"{path} is not the running kernel's vmlinux (build-id {build_id[:12]}… != {running[:12]}…)"
        return LocatedDebugInfo(path, None, build_id, note)
    mismatched: list[str] = []
    for candidate in kernel_candidates(release):
        if not candidate.is_file() or not has_dwarf(candidate):
            continue
        build_id = ElfSections(candidate).build_id()
        if running and build_id and build_id != running:
            mismatched.append(str(candidate))
            continue
        return LocatedDebugInfo(candidate, None, build_id)
    looked = [str(path) for path in kernel_candidates(release)]
    remote = fetch_debuginfo(running, debuginfod, looked) if running else None
    if remote is not None:
        file, note = remote
        return LocatedDebugInfo(file, None, running, note)
    if mismatched:
        raise UserError(
            f"{', '.join(mismatched)}: built for another kernel (build-id differs from /sys/kernel/notes)",
            "install the debug symbols of the running kernel, or pass -k VMLINUX to read another kernel's",
        )
    raise UserError(
        f"no debug vmlinux for kernel {release} (looked in {', '.join(looked)})",
        KERNEL_PACKAGE_HINT.format(r=release),
    )


def source_path(raw_path: str, comp_dir: str | None, prefix: str | None) -> str | None:
    """The readable source file for a DWARF file name, exactly as perf resolves it.

    Without a prefix: an absolute name as is, a relative one under comp_dir. With ``-s PREFIX``:
    PREFIX/name, then dropping leading directories of name one at a time until a file exists.
    perf prints the resulting path (double slashes included), so this keeps its spelling.
    """
    if not prefix:
        if not raw_path.startswith("/") and comp_dir:
            candidate = f"{comp_dir}/{raw_path}"
            return candidate if os.access(candidate, os.R_OK) else None
        return raw_path if os.access(raw_path, os.R_OK) else None
    rest = raw_path
    while True:
        candidate = f"{prefix}/{rest}"
        if os.access(candidate, os.R_OK):
            return candidate
        slash = rest.find("/", 1)
        if slash < 0:
            return None
        rest = rest[slash:]
