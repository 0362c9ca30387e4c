"""The layering rules, checked on the source: cores stay pure, screens and widgets stay views.

    python -m kprobe_tui.devtools.layering [PACKAGE_DIR]

exits 1 and names each import that breaks a rule (file:line), 0 when there is none. The rules:

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
from dataclasses import dataclass
from pathlib import Path

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


def _within(module: str, parent: str) -> bool:
    return module == parent or module.startswith(parent + ".")


def _is_private(dotted: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in dotted.split("."))


def check(package_dir: Path, package: str = "kprobe_tui") -> list[Violation]:
    """Every import under ``package_dir`` (the package named ``package``) that breaks a layering rule."""
    cores = tuple(f"{package}.{core}" for core in CORES)
    views = tuple(f"{package}.{view}" for view in VIEWS)
    forbidden = tuple(name.format(package=package) for name in VIEW_FORBIDDEN)
    found = []
    for path in sorted(package_dir.rglob("*.py")):
        module = module_name(path, package_dir, package)
        is_core = any(_within(module, core) for core in cores)
        is_view = any(_within(module, view) for view in views)
        if not (is_core or is_view):
            continue
        for imp in imports_of(path.read_text(encoding="utf-8"), module, path.name == "__init__.py"):
            imported = [imp.target] + [f"{imp.target}.{name}" for name in imp.names]
            if is_core:
                for library in (*TERMINAL_LIBRARIES, f"{package}.tui"):
                    if _within(imp.target, library):
                        found.append(Violation(path, imp.line, module, imp.target, "a core never imports a view or "
                                               "a terminal library (textual, rich): the CLI and scripts run it bare"))
                        break
            if not is_view or imp.type_checking:
                continue
            for name in imported:
                if any(_within(name, part) for part in forbidden):
                    found.append(Violation(path, imp.line, module, name, "a view asks a core's public API "
                                           "(tracefs, pyelftools and the DWARF engine are its internals)"))
                    break
                if any(_within(name, core) for core in cores) and _is_private(name.removeprefix(package + ".")):
                    found.append(Violation(path, imp.line, module, name, "a view never imports a core's private "
                                           "module or name: make it public in the core, or keep it there"))
                    break
    return found


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
