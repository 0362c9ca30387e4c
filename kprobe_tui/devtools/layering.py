"""The layering rules, checked on the source: one order of layers, no cycle, cores pure, views views.

    python -m kprobe_tui.devtools.layering [PACKAGE_DIR]

exits 1 and names each import that breaks a rule (file:line), 0 when there is none. The rules:

- the package's units (its subpackages and top-level modules) stand in one order, ``ORDER``, bottom
  first: a unit imports only units on a lower rank (never one above, nor a sibling on its own rank),
  so each layer can be read, tested and reused without those above it; a unit missing from ``ORDER``
  is reported until it is placed;
- no two modules import each other, directly or round a longer circle: what they share moves into a
  module below both;
- a core (kernel/, debuginfo/, probes/, stream/, aggregate/, perfprobe/, and elf.py) never imports
  textual, rich or the TUI: the CLI, scripts and tests use them without a terminal;
- a screen or widget (tui/screens/, tui/widgets/) never imports, at run time, tracefs, pyelftools,
  the ELF reader, the DWARF engine (dwarfinfo, dwarfopen, lineprogram, locexpr, leb128, aranges, sections)
  or anything private of a core (a ``_module`` or a ``_name``): it asks the cores'
  public API. Imports under ``if TYPE_CHECKING:`` are only annotations and are allowed.

Every import counts, a function-local one too, and ``importlib.import_module("...")`` with a literal.
The source is parsed, never imported: the check runs without textual installed.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

# Bottom first; a unit imports only from ranks below its own. "__init__" is the package's own module
# (its version). elf sits below machine (machine checks an ELF header); debuginfo needs no kernel
# or stream but probes needs all three; doctor is a report the CLI and the TUI both show.
ORDER: tuple[tuple[str, ...], ...] = (
    ("__init__", "errors"),
    ("files",),
    ("textsafe", "matching", "blocking", "config"),
    ("elf",),
    ("machine",),
    ("kernel",),
    ("stream",),
    ("debuginfo",),
    ("probes",),
    ("perfprobe", "aggregate", "doctor"),
    ("serve",),  # the exporter's web server (issue 30): its command in commands/ sits above it
    ("commands", "tui"),
    ("cli", "devtools"),
    ("__main__",),  # python -m kprobe_tui: runs the CLI
)
CORES = ("kernel", "debuginfo", "probes", "stream", "aggregate", "perfprobe", "elf")
VIEWS = ("tui.screens", "tui.widgets")
TERMINAL_LIBRARIES = ("textual", "rich")
# What a view must reach only through a core's public API, by module (and everything below it).
VIEW_FORBIDDEN = ("{package}.kernel.tracefs", "elftools", "{package}.elf",
                  *(f"{{package}}.debuginfo.{engine}" for engine in ("dwarfinfo", "dwarfopen", "lineprogram", "locexpr",
                                                                    "leb128", "aranges", "sections")))


@dataclass(frozen=True)
class Violation:
    path: Path
    line: int
    module: str  # the module importing
    imported: str  # what it imports, dotted
    rule: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.module} imports {self.imported}: {self.rule}"


@dataclass(frozen=True)
class Import:
    line: int
    target: str  # the module, dotted and absolute
    names: tuple[str, ...]  # the names taken from it (from X import a, b); () for "import X"
    type_checking: bool  # under "if TYPE_CHECKING:": an annotation, never run


def module_name(path: Path, package_dir: Path, package: str) -> str:
    parts = path.relative_to(package_dir).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join((package, *parts))


def imports_of(source: str, module: str, is_package: bool) -> list[Import]:
    """Every import in a module's source (function-local ones too), relative ones made absolute."""
    collector = _Imports(module if is_package else module.rpartition(".")[0])
    collector.visit(ast.parse(source))
    return collector.found


class _Imports(ast.NodeVisitor):
    def __init__(self, here: str) -> None:
        self.here = here  # the package relative imports start from
        self.type_checking = False
        self.found: list[Import] = []

    def visit_If(self, node: ast.If) -> None:
        self.visit(node.test)
        outer = self.type_checking
        self.type_checking = outer or _is_type_checking(node.test)
        for child in node.body:
            self.visit(child)
        self.type_checking = outer
        for child in node.orelse:
            self.visit(child)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.found.append(Import(node.lineno, alias.name, (), self.type_checking))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        target = node.module or ""
        if node.level:
            base = self.here.split(".")
            base = base[: len(base) - (node.level - 1)]
            target = ".".join([*base, target] if target else base)
        self.found.append(Import(node.lineno, target, tuple(a.name for a in node.names), self.type_checking))

    def visit_Call(self, node: ast.Call) -> None:
        if _is_import_call(node.func) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            self.found.append(Import(node.lineno, node.args[0].value, (), self.type_checking))
        self.generic_visit(node)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _is_import_call(func: ast.expr) -> bool:
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return name in ("import_module", "__import__")


def unit_of(module: str) -> str:
    """The unit of ``ORDER`` a dotted module belongs to: its subpackage, its top-level module, or "__init__"."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def rank_of(unit: str) -> int | None:
    return next((rank for rank, units in enumerate(ORDER) if unit in units), None)


def resolved(imp: Import, modules: Collection[str]) -> list[str]:
    """The package's modules an import loads: ``from P import m`` is the module P.m when there is one, else P
    (or P's nearest enclosing module: the check reads a tree that may be mid-edit)."""
    found = [f"{imp.target}.{name}" for name in imp.names if f"{imp.target}.{name}" in modules]
    if len(found) == len(imp.names) and imp.names:
        return found
    target = imp.target
    while target and target not in modules:
        target = target.rpartition(".")[0]
    return [*found, target] if target else found


def cycles(graph: Mapping[str, Collection[str]]) -> list[list[str]]:
    """Each import cycle of ``graph`` (module -> modules it imports) as one circle, ``[a, b, ..., a]``:
    a shortest way back to the first module (by name) of each strongly connected component."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    for root in sorted(graph):  # Tarjan's, iterative: a long chain of imports must not hit the recursion limit
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            child = next(edges, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph.get(node, ()):
                    components.append(component)
    return [_circle(graph, component) for component in components]


def _circle(graph: Mapping[str, Collection[str]], component: set[str]) -> list[str]:
    start = min(component)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:  # breadth first inside the component, until an edge leads back to start
        following = []
        for node in frontier:
            for child in sorted(graph.get(node, ())):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if child in component and child not in came_from:
                    came_from[child] = node
                    following.append(child)
        frontier = following
    raise AssertionError(f"{sorted(component)} is not a cycle")


def _within(module: str, parent: str) -> bool:
    return module == parent or module.startswith(parent + ".")


def _is_private(dotted: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in dotted.split("."))


def check(package_dir: Path, package: str = "kprobe_tui") -> list[Violation]:
    """Every import under ``package_dir`` (the package named ``package``) that breaks a layering rule."""
    paths = {module_name(path, package_dir, package): path for path in sorted(package_dir.rglob("*.py"))}
    imports = {module: imports_of(path.read_text(encoding="utf-8"), module, path.name == "__init__.py")
               for module, path in paths.items()}
    found = [violation for module, path in paths.items() for imp in imports[module]
             if (violation := _broken_rule(path, module, imp, package, paths)) is not None]
    found += _unplaced(paths, package)
    graph = {module: {name for imp in found_imports if not imp.type_checking for name in resolved(imp, paths)} - {module}
             for module, found_imports in imports.items()}
    for circle in cycles(graph):
        first, second = circle[0], circle[1]
        line = next(imp.line for imp in imports[first] if not imp.type_checking and second in resolved(imp, paths))
        found.append(Violation(paths[first], line, first, second, "an import cycle (" + " -> ".join(circle) +
                               "): move what they share into a module below both"))
    return found


def _broken_rule(path: Path, module: str, imp: Import, package: str, modules: Collection[str]) -> Violation | None:
    """The first rule ``imp`` breaks, or None: one import is reported once."""
    is_core = any(_within(module, f"{package}.{core}") for core in CORES)
    if is_core and any(_within(imp.target, library) for library in (*TERMINAL_LIBRARIES, f"{package}.tui")):
        return Violation(path, imp.line, module, imp.target, "a core never imports a view or a terminal library "
                         "(textual, rich): the CLI and scripts run it bare")
    if any(_within(module, f"{package}.{view}") for view in VIEWS) and not imp.type_checking:
        forbidden = tuple(name.format(package=package) for name in VIEW_FORBIDDEN)
        for name in [imp.target] + [f"{imp.target}.{name}" for name in imp.names]:
            if any(_within(name, part) for part in forbidden):
                return Violation(path, imp.line, module, name, "a view asks a core's public API "
                                 "(tracefs, pyelftools and the DWARF engine are its internals)")
            if any(_within(name, f"{package}.{core}") for core in CORES) \
                    and _is_private(name.removeprefix(package + ".")):
                return Violation(path, imp.line, module, name, "a view never imports a core's private "
                                 "module or name: make it public in the core, or keep it there")
    here = rank_of(unit_of(module))
    for name in resolved(imp, modules):
        there = rank_of(unit_of(name))
        if here is not None and there is not None and unit_of(name) != unit_of(module) and there >= here:
            shown = name if name.startswith(imp.target) else imp.target  # as written, when the tree lacks it
            return Violation(path, imp.line, module, shown, f"{unit_of(module)} (rank {here} of ORDER) imports "
                             f"{unit_of(name)} (rank {there}): only lower ranks; move what it needs down")
    return None


def _unplaced(paths: Mapping[str, Path], package: str) -> list[Violation]:
    """A violation for each unit missing from ``ORDER`` (named once, at its first file)."""
    first: dict[str, str] = {}
    for module in sorted(paths):
        first.setdefault(unit_of(module), module)
    return [Violation(paths[module], 1, module, "", f"{unit} is not in ORDER (kprobe_tui/devtools/layering.py): "
                      "add it on the rank above everything it imports") for unit, module in first.items()
            if rank_of(unit) is None]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    package_dir = Path(args[0]) if args else Path(__file__).resolve().parents[1]
    violations = check(package_dir, package_dir.name)
    for violation in violations:
        print(violation)
    print(f"{len(violations)} layering violation(s) in {package_dir}" if violations
          else f"layering: clean ({package_dir})", file=sys.stderr)
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
