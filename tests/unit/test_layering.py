"""The layering check (``python -m kprobe_tui.devtools.layering``): the tree passes it, and it fails on
each kind of violation planted in a package of its own: a view's import, an import up the order, a cycle."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kprobe_tui.devtools.layering import ORDER, check, cycles

PACKAGE = Path(__file__).parents[2] / "kprobe_tui"


def test_the_tree_keeps_its_layers():
    violations = check(PACKAGE)
    assert not violations, "\n".join(map(str, violations))


def plant(tmp_path: Path, files: dict[str, str]) -> Path:
    """A package "kprobe_tui" of its own holding ``files``: the check reads source, never imports it."""
    root = tmp_path / "kprobe_tui"
    for name in ("", "kernel", "probes", "debuginfo", "stream", "aggregate", "tui", "tui/screens", "tui/widgets"):
        (root / name).mkdir(parents=True, exist_ok=True)
        (root / name / "__init__.py").write_text("")
    for name, text in files.items():
        (root / name).write_text(text)
    return root


CLEAN = {
    "errors.py": "",
    "kernel/tracefs.py": "import os\nfrom kprobe_tui.errors import UserError\n",
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


@pytest.mark.parametrize("name, text, imported", [
    ("kernel/events.py", "from kprobe_tui.probes.spec import CompiledProbe\n", "kprobe_tui.probes.spec"),
    ("kernel/events.py", "from ..probes import plan\n", "kprobe_tui.probes.plan"),  # relative, a module by name
    ("stream/store.py", "def f():\n    import kprobe_tui.aggregate\n", "kprobe_tui.aggregate"),  # function-local
    ("errors.py", "from kprobe_tui.stream import Store\n", "kprobe_tui.stream"),
    ("aggregate/run.py", "import kprobe_tui.perfprobe\n", "kprobe_tui.perfprobe"),  # a sibling on its rank
])
def test_an_import_up_the_order_fails(tmp_path, name, text, imported):
    (tmp_path / "kprobe_tui" / "perfprobe").mkdir(parents=True)
    (tmp_path / "kprobe_tui" / "perfprobe" / "__init__.py").write_text("")
    root = plant(tmp_path, {**CLEAN, name: text})
    violations = check(root)
    assert [(v.path.relative_to(root).as_posix(), v.imported) for v in violations] == [(name, imported)]
    assert "of ORDER) imports" in violations[0].rule


def test_a_unit_missing_from_the_order_is_named(tmp_path):
    root = plant(tmp_path, {**CLEAN, "newthing.py": ""})
    assert [(v.module, v.rule.split(" is not")[0]) for v in check(root)] == [("kprobe_tui.newthing", "newthing")]


@pytest.mark.parametrize("files", [
    {"kernel/a.py": "from kprobe_tui.kernel import b\n", "kernel/b.py": "from kprobe_tui.kernel.a import x\n"},
    {"kernel/a.py": "from . import b\n", "kernel/b.py": "def late():\n    from .a import x\n"},  # hidden in a function
    {"kernel/a.py": "import kprobe_tui.kernel.b\n", "kernel/b.py": "from kprobe_tui.kernel import c\n",
     "kernel/c.py": "def late():\n    import kprobe_tui.kernel.a\n"},  # round three modules
])
def test_a_planted_cycle_fails(tmp_path, files):
    root = plant(tmp_path, {**CLEAN, **files})
    violations = check(root)
    assert [(v.module, v.imported) for v in violations] == [("kprobe_tui.kernel.a", "kprobe_tui.kernel.b")]
    assert "an import cycle (kprobe_tui.kernel.a -> kprobe_tui.kernel.b -> " in violations[0].rule


def test_a_type_checking_import_makes_no_cycle(tmp_path):
    root = plant(tmp_path, {**CLEAN, "kernel/a.py": "from kprobe_tui.kernel import b\n",
                            "kernel/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                           "    from kprobe_tui.kernel.a import x\n"})
    assert check(root) == []


def test_cycles_are_found_without_recursion_on_a_long_chain():
    chain = {f"m{i}": {f"m{i + 1}"} for i in range(5000)} | {"m5000": {"m0"}, "x": {"x"}}
    found = cycles(chain)
    assert sorted(len(circle) for circle in found) == [2, 5002]


def test_every_unit_of_the_tree_is_placed_once():
    units = [unit for rank in ORDER for unit in rank]
    assert len(units) == len(set(units))


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
