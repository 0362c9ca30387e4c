"""Debug info where distributions put it: a .gnu_debuglink file, dwz's shared file, compressed sections.

Each variant of c/probed.c (separate_builds.py) must list exactly what perf lists on the plain
unstripped build, and its uprobes must read the values the program has.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from separate_builds import Builds

from kprobe_tui.debuginfo import locate
from kprobe_tui.debuginfo.describe import format_points
from kprobe_tui.debuginfo.lines import LineSpec, find_line_range, render
from kprobe_tui.debuginfo.scope import PointSpec, open_debuginfo
from kprobe_tui.errors import UserError
from kprobe_tui.kernel import lifetime
from kprobe_tui.kernel.events import Events
from kprobe_tui.kernel.instance import Instance
from kprobe_tui.kernel.tracefs import Tracefs
from kprobe_tui.probes.compile import compile_spec
from kprobe_tui.probes.spec import parse_spec
from kprobe_tui.stream.parser import HEADER, parse_args

VARIANTS = ["debuglink", "dwz", "zlib", "zstd"]


def variant(builds: Builds, name: str):
    binary = getattr(builds, name)
    if binary is None:
        pytest.skip(f"this objcopy cannot make {name} sections")
    return binary


def our_lines(binary, spec: str) -> str:
    info = open_debuginfo(binary=str(binary))
    return render(info, find_line_range(info, LineSpec.parse(spec)))[0]


def our_vars(binary, spec: str) -> str:
    info = open_debuginfo(binary=str(binary))
    parsed = PointSpec.parse(spec)
    return format_points(parsed, info.probe_points(parsed), verbose=False)


@pytest.mark.perf
@pytest.mark.parametrize("name", VARIANTS)
def test_lines_and_vars_equal_perf_on_the_unstripped_build(builds, expected, name):
    """Each test has its own index cache (conftest), so nothing is answered from another variant's reading."""
    binary = variant(builds, name)
    for spec, text in expected.lines.items():
        assert our_lines(binary, spec) == text, spec
    for spec, text in expected.vars.items():
        if text is None:
            with pytest.raises(UserError):
                our_vars(binary, spec)
        else:
            assert our_vars(binary, spec) == text, spec


def test_each_variant_is_read_where_it_really_is(builds):
    """The comparisons above prove something only if the DWARF came from where the variant puts it."""
    assert locate.ElfSections(builds.debuglink).has_dwarf is False
    assert open_debuginfo(binary=str(builds.debuglink)).located.debug_file == builds.debuglink.parent / "prog.debug"
    dwz = open_debuginfo(binary=str(builds.dwz)).located
    assert dwz.debug_file == builds.dwz and dwz.supplementary == builds.dwz_alt
    readelf = subprocess.run(["readelf", "--debug-dump=info", str(builds.dwz)], capture_output=True, text=True).stdout
    assert "(alt indirect string" in readelf and re.search(r"DW_AT_type\s+: <alt 0x", readelf)
    for name in ("zlib", "zstd"):
        binary = getattr(builds, name)
        if binary is not None:
            sections = subprocess.run(["readelf", "-SW", str(binary)], capture_output=True, text=True).stdout
            assert re.search(r"\.debug_info\s.*\bC\b", sections), f"{name}: .debug_info is not compressed"


def test_dwz_without_its_shared_file_says_which_file_is_missing(builds, tmp_path):
    """Without the shared file the types and variables would be missing: refuse, naming it."""
    binary = tmp_path / "prog"
    shutil.copy(builds.dwz, binary)
    moved = builds.dwz_alt.rename(tmp_path / "elsewhere.dwz")
    try:
        with pytest.raises(UserError) as error:
            open_debuginfo(binary=str(binary))
    finally:
        moved.rename(builds.dwz_alt)
    assert str(builds.dwz_alt) in error.value.message and "dwz" in error.value.message
    assert "DEBUGINFOD_URLS" in error.value.hint


def test_a_debuglink_whose_crc_does_not_match_is_not_used(builds, tmp_path):
    binary = tmp_path / "prog"
    shutil.copy(builds.debuglink, binary)
    other = tmp_path / "prog.debug"
    subprocess.run(["objcopy", "--only-keep-debug", str(builds.zlib), str(other)], check=True)  # same name, other file
    with pytest.raises(UserError) as error:
        open_debuginfo(binary=str(binary))
    assert str(other) in error.value.message


def test_zstd_sections_without_the_zstandard_module_say_what_to_install(builds, monkeypatch):
    binary = variant(builds, "zstd")
    import sys

    monkeypatch.setitem(sys.modules, "zstandard", None)  # as if not installed
    with pytest.raises(UserError) as error:
        our_vars(binary, "describe")
    assert "zstd-compressed" in error.value.message and "python3-zstandard" in error.value.hint


# ---- uprobes on them --------------------------------------------------------------------


def capture(tracefs: Tracefs, probes, argv: list[str]) -> tuple[str, dict[str, dict]]:
    """Create run-scoped probes, record them in our own instance while ``argv`` runs, remove them."""
    events, instance = Events(tracefs), Instance(tracefs)
    instance.create()
    created = []
    try:
        created = events.create(probes, run_scoped=True)
        for probe in probes:
            instance.enable(probe.group, probe.event)
        output = subprocess.run(argv, capture_output=True, text=True).stdout  # exits 1: clamp(global_counter, 0, 1)
        trace = instance.tracefs.read("trace")
    finally:
        instance.remove()
        for event in created:
            events.delete(event)
    recorded = {}
    for line in trace.splitlines():
        match = HEADER.match(line)
        if match:
            recorded[match["event"]] = parse_args(match["body"])
    return output, recorded


@pytest.mark.live
@pytest.mark.parametrize("name", VARIANTS)
def test_uprobes_read_the_programs_values(builds, tracefs_root, name):
    """Members through types that dwz moved to its shared file, a string, a parameter: as the program has them."""
    binary = variant(builds, name)
    group = lifetime.run_name()
    describe = compile_spec(parse_spec(["describe", "s->name:string", "s->box.corner.y", "size"], binary=str(binary)), group)
    total = compile_spec(parse_spec(["total_area", "list->box.corner.x", "scale"], binary=str(binary)), group,
                         [p.event for p in describe])
    output, recorded = capture(Tracefs(tracefs_root), describe + total, [str(binary)])
    assert f"{binary} at (0,0) level 0 delta 0" in output  # what describe() saw, printed by the program
    assert recorded["describe"] == {"name": str(binary), "y": 20, "size": 128}
    assert recorded["total_area"] == {"x": 10, "scale": 1}
