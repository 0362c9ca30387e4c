"""The layering check (``python -m kprobe_tui.devtools.layering``): the tree passes it, and it fails on
each kind of violation planted in a package of its own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kprobe_tui.devtools.layering import check

PACKAGE = Path(__file__).parents[2] / "kprobe_tui"


def test_the_tree_keeps_its_layers():
    violations = check(PACKAGE)
    assert not violations, "\n".join(map(str, violations))


def plant(tmp_path: Path, files: dict[str, str]) -> Path:
    """A package "kprobe_tui" of its own holding ``files``: the check reads source, never imports it."""
    root = tmp_path / "kprobe_tui"
    for name in ("", "kernel", "probes", "debuginfo", "stream", "tui", "tui/screens", "tui/widgets"):
        (root / name).mkdir(parents=True, exist_ok=True)
        (root / name / "__init__.py").write_text("")
    for name, text in files.items():
        (root / name).write_text(text)
    return root


CLEAN = {
    "kernel/tracefs.py": "import os\n",
    "probes/_private.py": "",
    "probes/plan.py": "from kprobe_tui.kernel.tracefs import Tracefs\nfrom ._private import x\n",
    "tui/screens/ok.py": ("from typing import TYPE_CHECKING\nfrom textual.screen import Screen\n"
                          "from kprobe_tui.probes.plan import plan\n"
                          "if TYPE_CHECKING:\n    from kprobe_tui.kernel.tracefs import Tracefs\n"
                          "    import elftools\n"),
}


@pytest.mark.parametrize("name, text, imported", [
    ("kernel/events.py", "from textual.widgets import Static\n", "textual.widgets"),
    ("stream/store.py", "def f():\n    import rich.text\n", "rich.text"),  # function-local counts
    ("probes/view.py", "from ..tui.screens import ok\n", "kprobe_tui.tui.screens"),  # relative
    ("tui/screens/bad.py", "from kprobe_tui.kernel.tracefs import Tracefs\n", "kprobe_tui.kernel.tracefs"),
    ("tui/widgets/bad.py", "from kprobe_tui.kernel import tracefs\n", "kprobe_tui.kernel.tracefs"),
    ("tui/screens/bad.py", "def load():\n    from elftools.elf.elffile import ELFFile\n", "elftools.elf.elffile"),
    ("tui/screens/bad.py", "import kprobe_tui.debuginfo.dwarfinfo as dw\n", "kprobe_tui.debuginfo.dwarfinfo"),
    ("tui/widgets/bad.py", "from kprobe_tui.debuginfo.locexpr import location_at\n", "kprobe_tui.debuginfo.locexpr"),
    ("tui/widgets/bad.py", "from kprobe_tui.elf import ElfFile\n", "kprobe_tui.elf"),
    ("tui/screens/bad.py", "from kprobe_tui.probes import _private\n", "kprobe_tui.probes._private"),
    ("tui/screens/bad.py", "from kprobe_tui.probes.plan import _helper\n", "kprobe_tui.probes.plan._helper"),
    ("tui/screens/bad.py", "import importlib\nm = importlib.import_module('kprobe_tui.kernel.tracefs')\n",
     "kprobe_tui.kernel.tracefs"),
    ("tui/screens/bad.py", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    pass\nelse:\n"
     "    import elftools\n", "elftools"),  # the else of TYPE_CHECKING runs
])
def test_a_planted_violation_fails(tmp_path, name, text, imported):
    root = plant(tmp_path, {**CLEAN, name: text})
    violations = check(root)
    assert [(v.path.relative_to(root).as_posix(), v.imported) for v in violations] == [(name, imported)]


def test_clean_package_passes_and_the_command_says_so(tmp_path):
    root = plant(tmp_path, CLEAN)
    assert check(root) == []
    ran = subprocess.run([sys.executable, "-m", "kprobe_tui.devtools.layering", str(root)],
                         capture_output=True, text=True)
    assert ran.returncode == 0 and "clean" in ran.stderr
    (root / "tui/screens/bad.py").write_text("from kprobe_tui.kernel.tracefs import Tracefs\n")
    ran = subprocess.run([sys.executable, "-m", "kprobe_tui.devtools.layering", str(root)],
                         capture_output=True, text=True)
    assert ran.returncode == 1
    assert ran.stdout.startswith(f"{root / 'tui/screens/bad.py'}:1: kprobe_tui.tui.screens.bad imports "
                                 "kprobe_tui.kernel.tracefs")
