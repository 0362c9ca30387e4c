"""BinaryCatalog on programs compiled here and on the real libpython, with readelf as the oracle."""

from __future__ import annotations

import re
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

from kprobe_tui.errors import UserError
from kprobe_tui.kernel.catalog import Status
from kprobe_tui.probes.binary import NOT_PROBEABLE, WITH_DEBUG_INFO, WITHOUT_DEBUG_INFO, BinaryCatalog

C_DIR = Path(__file__).parents[1] / "tui" / "c"
LIBPYTHON = Path("/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0")


def build(tmp_path: Path, name: str, *flags: str) -> Path:
    out = tmp_path / name
    subprocess.run(["gcc", *flags, "-o", str(out), str(C_DIR / "catalog_main.c"), str(C_DIR / "catalog_other.c")],
                   check=True)
    return out


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    return build(tmp_path_factory.mktemp("catalog"), "prog", "-O2", "-g")


def readelf_functions(path: Path) -> dict[str, dict[int, tuple[int, str]]]:
    """name (version dropped) -> {address: (size, FUNC/IFUNC)} of defined symbols; {} for imports only."""
    out = subprocess.run(["readelf", "-W", "-s", str(path)], check=True, capture_output=True, text=True).stdout
    found: dict[str, dict[int, tuple[int, str]]] = defaultdict(dict)
    for value, size, kind, ndx, name in re.findall(
        r"^\s*\d+: ([0-9a-f]+)\s+(\d+|0x[0-9a-f]+) (FUNC|IFUNC)\s+\w+\s+\w+\s+(\S+) (\S+)", out, re.M
    ):
        base = name.split("@", 1)[0]
        if ndx == "UND":
            found.setdefault(base, {})
        else:
            found[base][int(value, 16)] = (int(size, 0), kind)
    return found


def test_names_sizes_and_statuses_match_readelf(program):
    catalog = BinaryCatalog(program)
    oracle = readelf_functions(program)
    # and twin, static in both files, once more per file as perf's FUNC@FILE takes it
    assert catalog.names == sorted([*oracle, "twin@catalog_main.c", "twin@catalog_other.c"])
    for name, defined in oracle.items():
        status, reason = catalog.classify(name)
        function = catalog.function(name)
        if not defined:
            assert status is NOT_PROBEABLE and reason.startswith("imported"), name
        elif len(defined) > 1:
            assert status is Status.AMBIGUOUS and f"{len(defined)} functions share this name" in reason, name
            assert sorted(s.address for s in function.symbols) == sorted(defined)
        else:
            [(address, (size, kind))] = defined.items()
            assert [s.address for s in function.symbols] == [address] and function.size == size, name
            if kind == "IFUNC":
                assert status is NOT_PROBEABLE and "ifunc" in reason, name
            elif size == 0:
                assert status is NOT_PROBEABLE and reason.startswith("size 0"), name


def test_each_kind_of_symbol_in_the_program(program):
    catalog = BinaryCatalog(program)
    assert catalog.status("twin") is Status.AMBIGUOUS  # static in both source files
    assert catalog.status("pick") is NOT_PROBEABLE  # the ifunc
    assert catalog.status("marker") is NOT_PROBEABLE  # the size-0 assembler label
    assert catalog.status("printf") is NOT_PROBEABLE  # imported from libc
    assert catalog.classify("may_fail.cold") == (
        Status.CLONE, "compiler clone of may_fail(): the cold (unlikely) path of may_fail, split out by the compiler: "
        "it sees error paths, not entries")
    assert catalog.status("may_fail") is WITH_DEBUG_INFO
    assert catalog.status("_start") is WITHOUT_DEBUG_INFO  # crt1.o's assembler: no DWARF for it
    assert catalog.function("may_fail").prototype == "int may_fail(int x)"
    assert catalog.function("twin_caller").prototype == "int twin_caller(int x)"
    assert catalog.function("oops").prototype == "void oops(char* what, int x)"  # perf's spelling: const dropped
    assert catalog.function("_start").prototype is None
    # one body each: the file's own, as perf probe -x prog twin@catalog_other.c places it
    other, main = catalog.function("twin@catalog_other.c"), catalog.function("twin@catalog_main.c")
    assert {other.symbols[0].address, main.symbols[0].address} == {s.address for s in catalog.function("twin").symbols}
    assert catalog.status("twin@catalog_other.c") is WITH_DEBUG_INFO and other.prototype == "int twin(int x)"
    assert "twin@catalog_main.c and twin@catalog_other.c" in catalog.classify("twin")[1]
    assert catalog.notes == []
    catalog.warm()
    assert catalog.details_ready


def test_without_debug_info_everything_is_registers_only(tmp_path):
    catalog = BinaryCatalog(build(tmp_path, "nodebug", "-O2"))
    assert catalog.status("may_fail") is WITHOUT_DEBUG_INFO
    assert catalog.function("may_fail").prototype is None
    assert any(note.startswith("no debug info:") for note in catalog.notes)


def test_stripped_program_lists_only_its_imports(tmp_path):
    binary = build(tmp_path, "stripped", "-O2", "-g")
    subprocess.run(["strip", "--strip-all", str(binary)], check=True)
    catalog = BinaryCatalog(binary)
    assert "may_fail" not in catalog.names and "printf" in catalog.names
    assert all(catalog.status(name) is NOT_PROBEABLE for name in catalog.names)


@pytest.mark.parametrize("make, message", [
    (lambda d: d / "missing", "no such file"),
    (lambda d: d, "is a directory"),
    (lambda d: (d / "text.txt").write_text("not elf") and d / "text.txt", "not an ELF file"),
])
def test_bad_paths_are_user_errors_naming_the_path(tmp_path, make, message):
    path = make(tmp_path)
    with pytest.raises(UserError) as caught:
        BinaryCatalog(path)
    assert str(path) in caught.value.message and message in caught.value.message


@pytest.mark.skipif(not LIBPYTHON.exists(), reason="needs pyenv's libpython3.11 with DWARF5")
def test_libpython_matches_readelf_and_has_dwarf_prototypes():
    catalog = BinaryCatalog(LIBPYTHON)
    oracle = readelf_functions(LIBPYTHON)
    assert [name for name in catalog.names if "@" not in name] == sorted(oracle)
    ambiguous = {name for name, defined in oracle.items() if len(defined) > 1}
    assert {name for name in catalog.names if catalog.status(name) is Status.AMBIGUOUS} == ambiguous
    assert "RAISE_ERROR_KNOWN_LOCATION" in ambiguous  # a static inline helper defined in many files
    assert catalog.status("PyList_Append") is WITH_DEBUG_INFO
    function = catalog.function("PyList_Append")
    assert function.prototype == "int PyList_Append(PyObject* op, PyObject* newitem)"  # Objects/listobject.c
    [(address, (size, _))] = oracle["PyList_Append"].items()
    assert (function.symbols[0].address, function.size) == (address, size)
    assert catalog.function("_PyEval_EvalFrameDefault").prototype == (
        "PyObject* _PyEval_EvalFrameDefault(PyThreadState* tstate, _PyInterpreterFrame* frame, int throwflag)")
    assert catalog.status("malloc") is NOT_PROBEABLE  # imported from libc


def test_both_catalogs_answer_what_the_browser_asks(program):
    """The browser asks the kernel's and a binary's catalog the same things (``FunctionCatalog``), with
    no probing for what one of them has: each says its statuses, a missing prototype and where in its words."""
    from kprobe_tui.kernel.catalog import Catalog, FunctionCatalog
    from kprobe_tui.kernel.snapshot import open_snapshot

    kernel = Catalog(open_snapshot(Path(__file__).parents[1] / "fixtures" / "snapshots" / "debian-6.12.tar.gz"))
    binary = BinaryCatalog(program)
    assert isinstance(kernel, FunctionCatalog) and isinstance(binary, FunctionCatalog)
    vfs_read, main = kernel.function("vfs_read"), binary.function("main")
    assert (kernel.where(vfs_read), binary.where(main)) == ("core kernel", program.name)
    assert kernel.labels[Status.FTRACE] == "ftrace" and binary.labels[WITH_DEBUG_INFO] == "debug info"
    assert "BTF" in kernel.missing_prototype and "DWARF" in binary.missing_prototype
