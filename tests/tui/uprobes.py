"""What the TUI tests ask the kernel about the uprobes they make."""

from __future__ import annotations

from pathlib import Path


def uprobes_on(root: Path, binary: Path) -> list[str]:
    """uprobe_events lines on ``binary`` (other tests may add their own meanwhile)."""
    return [line for line in (root / "uprobe_events").read_text().splitlines() if str(binary) in line]
