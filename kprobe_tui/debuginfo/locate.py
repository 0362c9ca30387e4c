"""Where the debug info and the source text are.

User binaries: the file itself, its .gnu_debuglink (beside it, in .debug/, under /usr/lib/debug),
or its build-id under /usr/lib/debug/.build-id. The kernel: an explicit vmlinux, else the usual
distribution paths, each checked against the running kernel's build-id.
"""

from __future__ import annotations

import os
import platform
import shutil
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from kprobe_tui.errors import UserError

DEBUG_ROOT = Path("/usr/lib/debug")
KERNEL_NOTES = Path("/sys/kernel/notes")
NT_GNU_BUILD_ID = 3

KERNEL_PACKAGE_HINT = (
    "install the kernel's debug symbols: Debian `apt-get install linux-image-{r}-dbg`, "
    "Ubuntu `apt-get install linux-image-{r}-dbgsym`, Fedora `dnf debuginfo-install kernel-debuginfo`, "
    "or pass -k VMLINUX. Without them, BTF still allows entry probes with typed arguments."
)


@dataclass(frozen=True)
class LocatedDebugInfo:
    """The file holding the DWARF, and the binary the probes go on (the same file when unstripped)."""

    debug_file: Path
    binary: Path | None  # None for the kernel
    build_id: str | None
    note: str = ""  # something the user should know (e.g. a vmlinux not matching the running kernel)

    @property
    def is_kernel(self) -> bool:
        return self.binary is None


def build_id_of(elf: ELFFile) -> str | None:
    """The GNU build-id note of an ELF file, as lowercase hex."""
    for section in elf.iter_sections():
        if section.header.sh_type != "SHT_NOTE":
            continue
        for note in section.iter_notes():
            if note["n_type"] == "NT_GNU_BUILD_ID" and note["n_name"] == "GNU":
                desc = note["n_desc"]
                return desc if isinstance(desc, str) else bytes(desc).hex()
    return None


def running_kernel_build_id(notes_file: Path = KERNEL_NOTES) -> str | None:
    """The running kernel's build-id from /sys/kernel/notes (raw ELF notes)."""
    try:
        data = notes_file.read_bytes()
    except OSError:
        return None
    pos = 0
    while pos + 12 <= len(data):
        namesz, descsz, ntype = struct.unpack_from("<III", data, pos)
        pos += 12
        name = data[pos : pos + namesz]
        pos += (namesz + 3) & ~3
        desc = data[pos : pos + descsz]
        pos += (descsz + 3) & ~3
        if ntype == NT_GNU_BUILD_ID and name.rstrip(b"\0") == b"GNU":
            return desc.hex()
    return None


def _has_dwarf(path: Path) -> bool:
    try:
        with open(path, "rb") as stream:
            elf = ELFFile(stream)
            section = elf.get_section_by_name(".debug_info")
            return section is not None and section.header.sh_type != "SHT_NOBITS"
    except (OSError, ELFError):
        return False


def _debuglink(elf: ELFFile) -> tuple[str, int] | None:
    section = elf.get_section_by_name(".gnu_debuglink")
    if section is None:
        return None
    data = section.data()
    name = data.split(b"\0", 1)[0].decode(errors="replace")
    crc_at = (len(name) + 1 + 3) & ~3
    return name, struct.unpack_from("<I", data, crc_at)[0]


def _crc_matches(path: Path, crc: int) -> bool:
    value = 0
    with open(path, "rb") as stream:
        while chunk := stream.read(1 << 20):
            value = zlib.crc32(chunk, value)
    return value == crc


def find_binary_debuginfo(binary: str) -> LocatedDebugInfo:
    """The DWARF for a user program or library, or a UserError saying where it was looked for."""
    path = Path(binary)
    if not path.exists() and "/" not in binary:
        found = shutil.which(binary)
        path = Path(found) if found else path
    if not path.is_file():
        raise UserError(f"{binary}: no such file", "give the path of the program or library to probe (-x PATH)")
    path = path.resolve()
    try:
        with open(path, "rb") as stream:
            elf = ELFFile(stream)
            build_id = build_id_of(elf)
            link = _debuglink(elf)
            has_own = elf.get_section_by_name(".debug_info") is not None
    except ELFError as exc:
        raise UserError(f"{binary}: not an ELF file ({exc})", "-x takes a compiled program or shared library") from exc
    if has_own and _has_dwarf(path):
        return LocatedDebugInfo(path, path, build_id)
    looked: list[Path] = []
    if link:
        name, crc = link
        for candidate in (path.parent / name, path.parent / ".debug" / name,
                          DEBUG_ROOT / path.parent.relative_to("/") / name):
            looked.append(candidate)
            if candidate.is_file() and _crc_matches(candidate, crc) and _has_dwarf(candidate):
                return LocatedDebugInfo(candidate, path, build_id)
    if build_id:
        candidate = DEBUG_ROOT / ".build-id" / build_id[:2] / f"{build_id[2:]}.debug"
        looked.append(candidate)
        if candidate.is_file() and _has_dwarf(candidate):
            return LocatedDebugInfo(candidate, path, build_id)
    where = ", ".join(str(p) for p in looked) or "nowhere else (no .gnu_debuglink, no build-id)"
    raise UserError(
        f"{path}: no DWARF debug info (looked in the file itself, {where})",
        "install its debug symbols (Debian: the matching -dbgsym package, Fedora: dnf debuginfo-install) "
        "or rebuild it with -g",
    )


def kernel_candidates(release: str) -> list[Path]:
    """The usual places distributions put a debug vmlinux, in the order they are tried."""
    return [
        DEBUG_ROOT / "boot" / f"vmlinux-{release}",
        DEBUG_ROOT / "lib" / "modules" / release / "vmlinux",
        Path("/boot") / f"vmlinux-{release}",
        Path("/lib/modules") / release / "build" / "vmlinux",
    ]


def find_vmlinux(vmlinux: str | None = None, release: str | None = None) -> LocatedDebugInfo:
    """An explicit vmlinux (any kernel: offline analysis), else one matching the running kernel."""
    release = release or platform.release()
    running = running_kernel_build_id()
    if vmlinux is not None:
        path = Path(vmlinux)
        if not path.is_file():
            raise UserError(f"{vmlinux}: no such file", "-k takes the path of a vmlinux with debug info")
        if not _has_dwarf(path):
            raise UserError(f"{vmlinux}: has no DWARF debug info", KERNEL_PACKAGE_HINT.format(r=release))
        build_id = _file_build_id(path)
        note = ""
        if running and build_id and build_id != running:
            note = f"{path} is not the running kernel's vmlinux (build-id {build_id[:12]}… != {running[:12]}…)"
        return LocatedDebugInfo(path, None, build_id, note)
    mismatched: list[str] = []
    for candidate in kernel_candidates(release):
        if not candidate.is_file() or not _has_dwarf(candidate):
            continue
        build_id = _file_build_id(candidate)
        if running and build_id and build_id != running:
            mismatched.append(str(candidate))
            continue
        return LocatedDebugInfo(candidate, None, build_id)
    if mismatched:
        raise UserError(
            f"{', '.join(mismatched)}: built for another kernel (build-id differs from /sys/kernel/notes)",
            "install the debug symbols of the running kernel, or pass -k VMLINUX to read another kernel's",
        )
    raise UserError(
        f"no debug vmlinux for kernel {release} (looked in {', '.join(map(str, kernel_candidates(release)))})",
        KERNEL_PACKAGE_HINT.format(r=release),
    )


def _file_build_id(path: Path) -> str | None:
    with open(path, "rb") as stream:
        return build_id_of(ELFFile(stream))


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
