"""``KernelSources``: the paths every reader uses, live or captured (``sources`` finds them, ``snapshot``
opens an archive of them). A module of its own so that both build one without importing each other.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from kprobe_tui.errors import UserError
from kprobe_tui.kernel.tracefs import Tracefs

__all__ = ["DEFAULT_BTF_DIR", "DEFAULT_DEBUGFS", "DEFAULT_KALLSYMS", "DEFAULT_TRACEFS", "KernelSources"]

DEFAULT_TRACEFS = Path("/sys/kernel/tracing")
DEFAULT_DEBUGFS = Path("/sys/kernel/debug")
DEFAULT_KALLSYMS = Path("/proc/kallsyms")
DEFAULT_BTF_DIR = Path("/sys/kernel/btf")


@dataclass
class KernelSources:
    """The files every reader uses; ``live`` is False for captured copies (read-only)."""

    tracefs: Path | None
    debugfs: Path | None
    kallsyms: Path
    btf_dir: Path
    live: bool = True
    notes: list[str] = field(default_factory=list)
    btf_name: str = "vmlinux"  # module BTF files sit beside it, named after their module
    release: str = field(default_factory=lambda: os.uname().release)

    @property
    def btf_vmlinux(self) -> Path:
        return self.btf_dir / self.btf_name

    @property
    def blacklist(self) -> Path | None:
        return self.debugfs / "kprobes" / "blacklist" if self.debugfs else None

    def tracing(self) -> Tracefs:
        """The tracefs to work in, or a UserError saying why there is none."""
        if self.tracefs is None:
            raise UserError(
                "tracefs is not mounted and could not be mounted",
                "as root: mount -t tracefs nodev /sys/kernel/tracing",
            )
        return Tracefs(self.tracefs, writable=self.live)
