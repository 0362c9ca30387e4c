"""A module that declares ``__all__`` declares all it gives other packages: every name another package of
kprobe_tui takes from it (``from m import name``, or ``m.name`` through an imported module) is listed."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from kprobe_tui.devtools.layering import imports_of, module_name

PACKAGE = Path(__file__).parents[2] / "kprobe_tui"


def modules(package_dir: Path = PACKAGE) -> dict[str, Path]:
    return {module_name(path, package_dir, package_dir.name): path for path in sorted(package_dir.rglob("*.py"))
            if "__pycache__" not in path.parts}


def _package(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def taken_across_packages(package_dir: Path = PACKAGE) -> dict[str, set[str]]:
    """For each module, the names modules of other packages take from it."""
    known = modules(package_dir)
    taken: dict[str, set[str]] = defaultdict(set)
    for module, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        bound: dict[str, str] = {}  # a local name -> the module it is
        for imp in imports_of(path.read_text(encoding="utf-8"), module, path.name == "__init__.py"):
            for name in imp.names:
                whole = f"{imp.target}.{name}"
                if whole in known:
                    bound[name] = whole
                elif imp.target in known and _package(imp.target, known[imp.target]) != _package(module, path):
                    taken[imp.target].add(name)
        for node in ast.walk(tree):
            if isinstance(node, ast.alias) and node.asname and node.name.startswith(package_dir.name + "."):
                bound[node.asname] = node.name  # import kprobe_tui.kernel.events as events
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if alias.asname and alias.name in bound:
                        bound[alias.asname] = bound.pop(alias.name)  # from kprobe_tui.debuginfo import dwarfinfo as dw
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound:
                target = bound[node.value.id]
                if target in known and _package(target, known[target]) != _package(module, path):
                    taken[target].add(node.attr)
    # only what the module binds: an attribute of a local variable that shadows a module's name is not its
    return {module: names & bound_names(known[module]) for module, names in taken.items()}


def bound_names(path: Path) -> set[str]:
    """The names a module's top level binds: defined, assigned or imported (in an ``if`` or ``try`` too)."""
    return _bound(ast.parse(path.read_text(encoding="utf-8")).body)


def _bound(statements: list[ast.stmt]) -> set[str]:
    names: set[str] = set()
    for node in statements:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {name.id for target in targets for name in ast.walk(target) if isinstance(name, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {alias.asname or alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, (ast.If, ast.Try)):
            names |= _bound([*node.body, *node.orelse, *(s for h in getattr(node, "handlers", ()) for s in h.body)])
    return names


def declared(path: Path) -> list[str] | None:
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return list(ast.literal_eval(node.value))
    return None


def test_every_name_taken_across_packages_is_declared():
    taken = taken_across_packages()
    problems = []
    for module, path in modules().items():
        names = declared(path)
        if names is not None and (missing := sorted(taken.get(module, set()) - set(names) - {"__version__"})):
            problems.append(f"{path.relative_to(PACKAGE.parent)}: add to __all__: {', '.join(missing)}")
    assert not problems, "\n".join(problems)


def test_a_name_taken_but_not_declared_is_found(tmp_path):
    root = tmp_path / "kprobe_tui"
    for name in ("kernel", "probes"):
        (root / name).mkdir(parents=True)
        (root / name / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "kernel" / "events.py").write_text("__all__ = ['Events']\nclass Events: ...\ndef other(): ...\nhelper = 1\n")
    (root / "probes" / "plan.py").write_text("from kprobe_tui.kernel import events as ev\nev.other()\n"
                                             "def f(ev):\n    return ev.count\n")  # a shadowing variable's: not taken
    (root / "probes" / "make.py").write_text("from kprobe_tui.kernel.events import Events, helper\n")
    assert taken_across_packages(root) == {"kprobe_tui.kernel.events": {"Events", "helper", "other"}}
