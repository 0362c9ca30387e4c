"""Kernel modules: Debian's debug files of 9p and virtio, read as perf probe -m reads them.

A module's debug file is relocatable (ET_REL): its DWARF means something only once relocated
over a layout of its sections, as libdwfl lays them out for perf. The module cannot be loaded
on this host (its kernel has no modules); the guests load it (tests/kernel/test_modules_guest.py).
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from debuginfo_helpers import perf_probe
from debuginfod_servers import DEBUGINFOD, Debuginfod

from kprobe_tui.debuginfo import locate, modules
from kprobe_tui.debuginfo.debuginfod import Client
from kprobe_tui.debuginfo.describe import format_points
from kprobe_tui.debuginfo.lines import LineSpec, find_line_range, render
from kprobe_tui.debuginfo.scope import PointSpec, open_debuginfo
from kprobe_tui.errors import UserError
from kprobe_tui.probes.compile import compile_spec
from kprobe_tui.probes.render import perf_command
from kprobe_tui.probes.spec import parse_spec

pytestmark = pytest.mark.vmlinux


def functions_of(module) -> list[str]:
    """The module's text symbols that perf can be compared on, sorted.

    Left out: init_module/cleanup_module and the functions they alias, and .cold parts. perf finds
    a name DWARF does not know through the symbol table, whose values in a relocatable file are
    section offsets: it lands in whatever function of .text sits at that offset (e.g. `perf probe -m
    virtio.ko -V init_module` lists virtio_dev_remove's variables), and it names virtio_init's
    entry init_module.
    """
    out = subprocess.run(["nm", str(module)], capture_output=True, text=True, check=True).stdout
    rows = [line.split() for line in out.splitlines() if len(line.split()) == 3 and line.split()[1] in "tT"]
    aliased = {address for address, _, name in rows if name in ("init_module", "cleanup_module")}
    return sorted({name for address, _, name in rows if address not in aliased and not name.endswith(".cold")})


def our_lines(info, spec: str) -> str:
    return render(info, find_line_range(info, LineSpec.parse(spec)))[0]


def our_vars(info, spec: str) -> str:
    parsed = PointSpec.parse(spec)
    return format_points(parsed, info.probe_points(parsed), verbose=False)


def perf_agrees(ours: str, *perf_args: str, undecided: list[str]) -> bool:
    """perf's listing equals ours; where it does not, perf is asked again: for a line whose address
    maps back to no line, perf decides from uninitialised stack values (line_range_walk_cb after a
    failed cu_find_lineinfo), and its answer changes from run to run. Equal to one of its answers
    is as equal as perf can be; ``undecided`` collects those specs for the failure message."""
    for attempt in range(8):
        if perf_probe(*perf_args).stdout == ours:
            if attempt:
                undecided.append(perf_args[-1])
            return True
    return False


@pytest.mark.perf
@pytest.mark.parametrize("which", ["ninep", "virtio"])
def test_module_lines_and_vars_equal_perf_m(perf, kernel_debug, module_debug, which):
    """Functions of the module: their lines, their variables at entry and at their first probeable lines."""
    module = getattr(module_debug, which)
    info = open_debuginfo(module=str(module), source_dir=str(kernel_debug.source))
    assert info.located.module == {"ninep": "9p", "virtio": "virtio"}[which]
    names = functions_of(module)[:: 3 if which == "ninep" else 1]
    listed = compared_vars = 0
    undecided: list[str] = []
    for name in names:
        expected = perf_probe("-m", str(module), "-s", str(kernel_debug.source), "-L", name)
        if expected.returncode != 0:
            continue
        ours = our_lines(info, name)
        assert perf_agrees(ours, "-m", str(module), "-s", str(kernel_debug.source), "-L", name, undecided=undecided), name
        listed += 1
        lines = [int(row.split()[0]) for row in ours.splitlines()[1:] if row[:7].strip().isdigit()]
        for spec in [name] + [f"{name}:{n}" for n in lines[1:3]]:
            want = perf_probe("-m", str(module), "-V", spec)
            if want.returncode == 0:
                assert our_vars(info, spec) == want.stdout, spec
                compared_vars += 1
            elif "Failed to find scope of probe point" in want.stderr:
                # perf lists the points it found, then gives up on an address it cannot place in a
                # scope (in a module: a part of the function in another section); we list those points
                found = re.findall(r"Probe point found: (\S+)", perf_probe("-v", "-m", str(module), "-V", spec).stderr)
                assert re.findall(r"@<(\S+)>", our_vars(info, spec)) == found, spec
            else:
                with pytest.raises(UserError):
                    our_vars(info, spec)
    assert listed >= 20 and compared_vars >= 30, (listed, compared_vars)
    assert len(undecided) <= 3, f"perf decided these only on some runs: {undecided}"


def sysfs_with(tmp_path, name: str, module) -> None:
    """/sys/module/<name>/notes as the kernel shows a loaded module: its raw build-id note."""
    notes = tmp_path / "sys-module" / name / "notes"
    notes.mkdir(parents=True)
    (notes / ".note.gnu.build-id").write_bytes(locate.ElfSections(module).data(".note.gnu.build-id"))


@pytest.fixture
def loaded_9p(tmp_path, monkeypatch, module_debug):
    """The module "loaded" as far as the locator looks (sysfs), the debug tree empty until the test fills it."""
    sysfs_with(tmp_path, "9p", module_debug.ninep)
    monkeypatch.setattr(modules, "SYS_MODULE", tmp_path / "sys-module")
    monkeypatch.setattr(modules, "MODULES", tmp_path / "no-lib-modules")
    monkeypatch.setattr(locate, "DEBUG_ROOT", tmp_path / "debug")
    monkeypatch.delenv("DEBUGINFOD_URLS", raising=False)
    return tmp_path / "debug"


@pytest.mark.parametrize("layout", ["kernel/fs/9p/9p.ko", "kernel/fs/9p/9p.ko.debug"], ids=["debian", "fedora"])
def test_a_loaded_module_is_found_in_the_debug_tree_by_its_build_id(loaded_9p, module_debug, layout):
    target = loaded_9p / "lib" / "modules" / module_debug.release / layout
    target.parent.mkdir(parents=True)
    shutil.copy(module_debug.ninep, target)
    located = modules.find_module_debuginfo("9p", release=module_debug.release)
    assert (located.debug_file, located.module, located.note) == (target, "9p", "")


def test_the_build_id_directory_and_a_mismatch(loaded_9p, module_debug):
    wrong = loaded_9p / "lib" / "modules" / module_debug.release / "kernel" / "9p.ko"
    wrong.parent.mkdir(parents=True)
    shutil.copy(module_debug.virtio, wrong)  # right name, another module's build
    with pytest.raises(UserError) as error:
        modules.find_module_debuginfo("9p", release=module_debug.release)
    assert "built for another kernel" in error.value.message and "linux-image-" in error.value.hint
    identity = locate.ElfSections(module_debug.ninep).build_id()
    by_id = loaded_9p / ".build-id" / identity[:2] / f"{identity[2:]}.debug"
    by_id.parent.mkdir(parents=True)
    shutil.copy(module_debug.ninep, by_id)
    assert modules.find_module_debuginfo("9p", release=module_debug.release).debug_file == by_id


@pytest.mark.skipif(DEBUGINFOD is None, reason="debuginfod is not installed (apt-get install debuginfod)")
def test_a_loaded_module_comes_from_debuginfod_by_its_build_id(loaded_9p, module_debug, tmp_path, monkeypatch):
    shelf = tmp_path / "served"
    shelf.mkdir()
    shutil.copy(module_debug.ninep, shelf / "9p.ko")
    identity = locate.ElfSections(module_debug.ninep).build_id()
    monkeypatch.setenv("DEBUGINFOD_CACHE_PATH", str(tmp_path / "cache"))
    with Debuginfod(shelf, tmp_path).start([identity]) as server:
        monkeypatch.setenv("DEBUGINFOD_URLS", server.url)
        located = modules.find_module_debuginfo("9p", release=module_debug.release, debuginfod=Client())
    assert located.debug_file == tmp_path / "cache" / identity / "debuginfo" and located.module == "9p"
    assert "downloaded" in located.note


def test_a_name_in_vmlinux_and_in_a_module_is_told_apart(kernel_debug, module_debug):
    """device_show is drivers/pci's in vmlinux and drivers/virtio's in virtio: -m picks, and the probe says which."""
    kernel = open_debuginfo(vmlinux=str(kernel_debug.vmlinux))
    virtio = open_debuginfo(module=str(module_debug.virtio))
    assert our_lines(kernel, "device_show").startswith("<device_show@drivers/pci/pci-sysfs.c:0>")
    assert our_lines(virtio, "device_show").startswith("<device_show@drivers/virtio/virtio.c:0>")
    [probe] = compile_spec(parse_spec(["device_show", "attr->attr.name:string"], module=str(module_debug.virtio)), "g")
    assert probe.definition() == "p:g/device_show virtio:device_show+0 name=+0(+0(%si)):string"
    assert perf_command(probe.spec) == f"perf probe -m {module_debug.virtio} -a 'device_show attr->attr.name:string'"


def test_a_line_probe_in_a_module_reads_a_stack_variable_through_its_relocated_cfi(module_debug):
    """err lives at the frame base (the CFA): the module's .debug_frame must be relocated like its DWARF.
    The line's two copies (one inlined) are one event, as perf makes them."""
    probes = compile_spec(parse_spec(["v9fs_file_read_iter:15", "ret", "err"], module=str(module_debug.ninep)), "g")
    assert [p.definition() for p in probes] == [
        "p:g/v9fs_file_read_iter_L15 9p:v9fs_file_read_iter+72 ret=%ax:s32 err=+4(%sp):s32",
        "p:g/v9fs_file_read_iter_L15 9p:v9fs_mmap_file_read_iter+72 ret=%ax:s32 err=+4(%sp):s32",
    ]


def test_a_module_name_that_is_not_one_never_reaches_kprobe_events():
    """-m names a file whose name (or .modinfo) becomes the place's MODULE: it must be a module name."""
    with pytest.raises(UserError) as error:
        compile_spec(parse_spec(["device_show"], module="virtio\nq:x"), "g")
    assert "not a kernel module name" in error.value.message
