"""`kprobe-tui lines` and `vars` against `perf probe -L/-V` on programs compiled for the test."""

from __future__ import annotations

import subprocess

import pytest
from debuginfo_helpers import C_DIR, FUNCTIONS, LINE_SPECS, VAR_SPECS, VARIANTS, perf_probe

from kprobe_tui.debuginfo.describe import format_points
from kprobe_tui.debuginfo.lines import LineSpec, find_line_range, render
from kprobe_tui.debuginfo.scope import PointSpec, open_debuginfo
from kprobe_tui.errors import UserError

pytestmark = pytest.mark.perf


def our_lines(binary, spec: str) -> str:
    info = open_debuginfo(binary=str(binary))
    text, _note = render(info, find_line_range(info, LineSpec.parse(spec)))
    return text


def our_vars(binary, spec: str, externs: bool = False) -> str:
    info = open_debuginfo(binary=str(binary))
    parsed = PointSpec.parse(spec)
    return format_points(parsed, info.probe_points(parsed, externs=externs), verbose=False)


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: f"{v[0]}-dwarf{v[1]}")
def test_lines_equal_perf(perf, programs, variant):
    binary = programs[variant]
    compared = 0
    for spec in LINE_SPECS:
        expected = perf_probe("-x", str(binary), "-L", spec)
        if expected.returncode != 0:
            continue
        assert our_lines(binary, spec) == expected.stdout, spec
        compared += 1
    assert compared >= len(FUNCTIONS), "perf listed too few of the functions: the comparison proved little"


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: f"{v[0]}-dwarf{v[1]}")
@pytest.mark.parametrize("externs", [False, True], ids=["locals", "externs"])
def test_vars_equal_perf(perf, programs, variant, externs):
    binary = programs[variant]
    compared = refused = 0
    for spec in VAR_SPECS:
        expected = perf_probe("-x", str(binary), "-V", spec, *(["--externs"] if externs else []))
        if expected.returncode != 0:
            # perf found no address or refused the line: so must we (a UserError, not a traceback)
            with pytest.raises(UserError):
                our_vars(binary, spec, externs)
            refused += 1
            continue
        assert our_vars(binary, spec, externs) == expected.stdout, spec
        compared += 1
    assert compared >= 10


def test_inline_only_function_lines_come_from_its_inlined_copies(perf, programs):
    """perf 6.1 fails on shape_area at -O2 (only inlined); we show its lines, flagged as such."""
    binary = programs[("O2", 5)]
    assert perf_probe("-x", str(binary), "-L", "shape_area").returncode != 0
    info = open_debuginfo(binary=str(binary))
    found = find_line_range(info, LineSpec.parse("shape_area"))
    text, note = render(info, found)
    assert found.from_inlined and "inlined copies" in note
    assert text.startswith("<shape_area@") and "      2  \tlong width" in text


def test_several_inlined_instances_are_sites(programs):
    info = open_debuginfo(binary=str(programs[("O2", 5)]))
    sites = info.function("shape_area")
    assert len(sites) >= 3 and all(site.is_inline for site in sites)
    source = (C_DIR / "probed.c").read_text().splitlines()
    calls = {number for number, text in enumerate(source, 1) if "= shape_area(" in text}
    assert len(calls) == 3 and {site.call_line for site in sites} == calls


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: f"{v[0]}-dwarf{v[1]}")
def test_uprobe_file_offsets_equal_perf(perf, programs, variant):
    """The address each probe point resolves to is the one perf would put in uprobe_events."""
    binary = programs[variant]
    info = open_debuginfo(binary=str(binary))
    compared = 0
    for spec in VAR_SPECS:
        expected = perf_probe("-x", str(binary), "-D", spec)
        if expected.returncode != 0:
            continue
        offsets = [int(line.rsplit(":", 1)[1], 16) for line in expected.stdout.split()
                   if line.startswith(f"{binary}:")]
        assert [p.file_offset for p in info.probe_points(spec)] == offsets, spec
        compared += 1
    assert compared >= 10


SOURCES = [C_DIR / "probed.c", *sorted((C_DIR.parents[1] / "live" / "c").glob("*.c")),
           *sorted((C_DIR.parents[1] / "tui" / "c").glob("*.c"))]


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2"])
def test_function_entry_places_equal_perf(perf, tmp_path, opt):
    """Where a FUNC probe reading variables goes (perf's prologue skip at -O0 included), function by
    function, is where perf probe -D puts it."""
    from kprobe_tui.probes.binary import WITH_DEBUG_INFO, BinaryCatalog
    from kprobe_tui.probes.compile import compile_spec
    from kprobe_tui.probes.spec import parse_spec

    compared, differ = 0, []
    for source in SOURCES:
        binary = tmp_path / source.stem
        others = [str(p) for p in source.parent.glob("*.c") if p != source and "catalog" in p.name and "catalog" in source.name]
        if "catalog_other" in source.name:
            continue  # linked into catalog_main
        library = [] if "main(" in source.read_text() else ["-shared", "-fPIC"]
        subprocess.run(["gcc", opt, "-g", *library, "-I", str(C_DIR), "-o", str(binary), str(source), *others],
                       check=True, capture_output=True)
        catalog = BinaryCatalog(binary)
        for function in catalog.names:
            if catalog.status(function) is not WITH_DEBUG_INFO or not function.isidentifier() or not function.isascii():
                continue
            expected = perf_probe("-x", str(binary), "-D", f"{function} $params")
            if expected.returncode != 0:
                continue
            theirs = sorted(int(line.split()[1].rsplit(":", 1)[1], 16) for line in expected.stdout.splitlines()
                            if line.startswith("p:"))
            probes = compile_spec(parse_spec([function, "$params"], binary=str(binary)), "g")
            ours = sorted(int(probe.place.rsplit(":", 1)[1], 16) for probe in probes)
            compared += 1
            if ours != theirs:
                differ.append((source.name, function, [hex(a) for a in ours], [hex(a) for a in theirs]))
    assert differ == []
    assert compared >= 25, "perf placed too few functions: the comparison proved little"
