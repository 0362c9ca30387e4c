"""The README's Layout names every package and module of kprobe_tui/, and nothing else; two modules share a
basename only where it says why. Other engineers add modules while one writes the README: each failure
names exactly what to add or remove, and where."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).parents[2]
PACKAGE = ROOT / "kprobe_tui"
ITEM = re.compile(r"^- `kprobe_tui/([\w/]+)/`(.*?)(?=^- |\Z)", re.M | re.S)
TOP_LEVEL = re.compile(r"`kprobe_tui/(\w+)\.py`")
NAMED = re.compile(r"`([a-z_][a-z0-9_]*)`")
SHARED = re.compile(r"^- `(\w+)`: ", re.M)


def layout(readme: str = (ROOT / "README.md").read_text(encoding="utf-8")) -> str:
    return readme.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]


def tree() -> dict[str, set[str]]:
    """Each package (``kernel``, ``tui/screens``; ``""`` for the top level) and its modules' names."""
    found: dict[str, set[str]] = defaultdict(set)
    for path in PACKAGE.rglob("*.py"):
        if "__pycache__" not in path.parts and path.name != "__init__.py":
            found[path.parent.relative_to(PACKAGE).as_posix().removeprefix(".")].add(path.stem)
    return found


def named(text: str) -> dict[str, set[str]]:
    """What the Layout names: each package item's backticked module names, and the top-level modules."""
    packages = {package: set(NAMED.findall(body)) for package, body in ITEM.findall(text)}
    return {**packages, "": set(TOP_LEVEL.findall(text))}


def differences(in_tree: dict[str, set[str]], in_readme: dict[str, set[str]]) -> list[str]:
    problems = []
    for package in sorted(in_tree.keys() | in_readme.keys()):
        item = f"the `kprobe_tui/{package}/` item" if package else "a `kprobe_tui/NAME.py` item"
        if package not in in_readme:
            problems.append(f"add an item `kprobe_tui/{package}/` naming {sorted(in_tree[package])}")
            continue
        if package not in in_tree:
            problems.append(f"remove the item `kprobe_tui/{package}/`: there is no such package")
            continue
        missing, extra = in_tree[package] - in_readme[package], in_readme[package] - in_tree[package]
        if missing:
            problems.append(f"add to {item}: {', '.join(sorted(missing))}")
        if extra:
            problems.append(f"remove from {item} (no such module): {', '.join(sorted(extra))}")
    return problems


def test_the_layout_names_every_package_and_module_and_nothing_else():
    problems = differences(tree(), named(layout()))
    assert not problems, "README.md's Layout is out of date:\n" + "\n".join(problems)


def test_shared_basenames_are_each_explained():
    modules: dict[str, list[str]] = defaultdict(list)
    for package, names in tree().items():
        for name in names:
            if name != "__main__":
                modules[name].append(f"{package}/{name}.py".lstrip("/"))
    shared = {name: sorted(paths) for name, paths in modules.items() if len(paths) > 1}
    explained = set(SHARED.findall(layout().split("Basenames two modules share", 1)[1].split("\n\n", 1)[0]))
    assert not shared.keys() - explained, "add to the Layout's shared basenames: " + "; ".join(
        f"{name} ({', '.join(shared[name])})" for name in sorted(shared.keys() - explained))
    assert not explained - shared.keys(), f"remove from the Layout's shared basenames: {sorted(explained - shared.keys())}"


def test_a_forgotten_or_stale_name_is_said_exactly():
    text = "- `kprobe_tui/kernel/`: `events`, `gone`\n- `kprobe_tui/old/`: `x`\n`kprobe_tui/cli.py`\n"
    assert differences({"kernel": {"events", "new"}, "stream": {"parser"}, "": {"cli", "errors"}}, named(text)) == [
        "add to a `kprobe_tui/NAME.py` item: errors",
        "add to the `kprobe_tui/kernel/` item: new",
        "remove from the `kprobe_tui/kernel/` item (no such module): gone",
        "remove the item `kprobe_tui/old/`: there is no such package",
        "add an item `kprobe_tui/stream/` naming ['parser']",
    ]
