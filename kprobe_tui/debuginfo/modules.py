"""A kernel module's debug info, found as ``perf probe -m MODULE`` finds it, checked by build-id.

``MODULE`` is a loaded module's name (``9p``, ``nf_tables``; ``-`` and ``_`` alike) or the path
of a module file with DWARF. A loaded module's build-id is in
``/sys/module/<name>/notes/.note.gnu.build-id``, and its debug file is, in order:

- where modules.dep puts the module, under the debug tree: Debian and Ubuntu install
  ``/usr/lib/debug/lib/modules/<release>/kernel/fs/9p/9p.ko``, Fedora ``.../9p.ko.debug``;
- any file of that name under ``/usr/lib/debug/lib/modules/<release>/``;
- ``/usr/lib/debug/.build-id/xx/rest.debug``;
- debuginfod, by the build-id.

A file built for another kernel is refused: its offsets would place probes on wrong instructions.
Probes in a module are placed as ``MODULE:func+off``, which the kernel resolves in that module
only, so a name that is also a vmlinux symbol (or in another module) is never confused with it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from kprobe_tui.debuginfo import locate
from kprobe_tui.debuginfo.locate import ElfSections, LocatedDebugInfo
from kprobe_tui.errors import UserError

if TYPE_CHECKING:
    from kprobe_tui.debuginfo.locate import Debuginfod

__all__ = ["find_module_debuginfo", "module_name"]

SYS_MODULE = Path("/sys/module")
MODULES = Path("/lib/modules")
COMPRESSED = (".xz", ".zst", ".gz")
MODULE_PACKAGE_HINT = (
    "install the kernel's debug symbols, which carry every module's (Debian `linux-image-{r}-dbg`, "
    "Ubuntu `linux-image-{r}-dbgsym`, Fedora `kernel-debuginfo`), set DEBUGINFOD_URLS to your "
    "distribution's debuginfod server, or pass -m /path/to/MODULE.ko with DWARF"
)


def module_name(text: str) -> str:
    """The kernel's spelling of a module name: ``nf-tables`` is ``nf_tables``."""
    return text.replace("-", "_")


def loaded_build_id(name: str) -> str | None:
    """The build-id of a loaded module, from its sysfs notes (raw ELF notes)."""
    return locate.running_kernel_build_id(SYS_MODULE / module_name(name) / "notes" / ".note.gnu.build-id")


def find_module_debuginfo(module: str, release: str | None = None, debuginfod: Debuginfod = None) -> LocatedDebugInfo:
    """The DWARF of a module named by name or path, or a UserError saying where it was looked for."""
    release = release or os.uname().release
    if "/" in module or Path(module).suffix in (".ko", ".debug"):
        return _module_file(Path(module), release)
    name = module_name(module)
    build_id = loaded_build_id(name)
    looked: list[str] = []
    mismatched: list[str] = []
    for candidate in _candidates(name, release):
        looked.append(str(candidate))
        if not locate.has_dwarf(candidate):
            continue
        found = ElfSections(candidate).build_id()
        if build_id and found != build_id:
            mismatched.append(str(candidate))
            continue
        note = "" if build_id else f"module {name} is not loaded: its debug file cannot be checked against it"
        return LocatedDebugInfo(candidate, None, found, note, module=name)
    if build_id:
        candidate = locate.build_id_path(build_id)
        looked.append(str(candidate))
        if locate.has_dwarf(candidate):
            return LocatedDebugInfo(candidate, None, build_id, module=name)
        remote = locate.fetch_debuginfo(build_id, debuginfod, looked)
        if remote is not None:
            file, note = remote
            return LocatedDebugInfo(file, None, build_id, note, module=name)
    if mismatched:
        raise UserError(f"{', '.join(mismatched)}: built for another kernel (build-id differs from "
                        f"/sys/module/{name}/notes)", MODULE_PACKAGE_HINT.format(r=release))
    loaded = "" if build_id else f"; module {name} is not loaded (lsmod), so debuginfod could not be asked by build-id"
    raise UserError(f"no debug info for module {name} (looked in {', '.join(looked) or 'nothing'}{loaded})",
                    MODULE_PACKAGE_HINT.format(r=release))


def _module_file(path: Path, release: str) -> LocatedDebugInfo:
    """-m PATH: the module file itself (perf takes a path too), named by its .modinfo."""
    if not path.is_file():
        raise UserError(f"{path}: no such file", "-m takes a loaded module's name or the path of a module with DWARF")
    elf = locate.read_elf(path, "-m takes a loaded module's name or the path of a .ko file")
    if not elf.has_dwarf:
        raise UserError(f"{path}: has no DWARF debug info", MODULE_PACKAGE_HINT.format(r=release))
    name = _modinfo_name(elf) or module_name(path.name.split(".", 1)[0])
    build_id = elf.build_id()
    loaded = loaded_build_id(name)
    note = ""
    if loaded and build_id and loaded != build_id:
        note = f"{path} is not the loaded {name} module (build-id {build_id[:12]}… != {loaded[:12]}…)"
    return LocatedDebugInfo(path.resolve(), None, build_id, note, module=name)


def _modinfo_name(elf: ElfSections) -> str | None:
    """``name=`` of the module's .modinfo (modpost writes it since Linux 5.x)."""
    for entry in (elf.data(".modinfo") or b"").split(b"\0"):
        if entry.startswith(b"name="):
            return entry[5:].decode(errors="replace")
    return None


def _candidates(name: str, release: str) -> list[Path]:
    """Debug files that may be the module's, most likely first (each is checked by build-id)."""
    tree = locate.DEBUG_ROOT / "lib" / "modules" / release
    found: list[Path] = []
    relative = _modules_dep(release).get(name)
    if relative is not None:
        found += [tree / relative, tree / f"{relative}.debug"]
    spellings = {name, name.replace("_", "-")}
    names = {f"{spelling}.ko{suffix}" for spelling in spellings for suffix in ("", ".debug")}
    for directory, _dirs, files in os.walk(tree):
        found += [Path(directory) / file for file in files if file in names]
    return list(dict.fromkeys(found))


def _modules_dep(release: str) -> dict[str, str]:
    """module name -> its path under /lib/modules/<release>, without a compression suffix."""
    try:
        text = (MODULES / release / "modules.dep").read_text(errors="replace")
    except OSError:
        return {}
    paths = {}
    for line in text.splitlines():
        relative = line.partition(":")[0]
        for suffix in COMPRESSED:
            relative = relative.removesuffix(suffix)
        paths[module_name(Path(relative).name.removesuffix(".ko"))] = relative
    return paths
