"""Real, large debug info: the pyenv libpython3.11 (DWARF5, -O3, location lists) and Debian's vmlinux."""

from __future__ import annotations

from pathlib import Path

import pytest
from debuginfo_helpers import perf_probe

from kprobe_tui.debuginfo.describe import format_points
from kprobe_tui.debuginfo.lines import LineSpec, find_line_range, render
from kprobe_tui.debuginfo.scope import PointSpec, open_debuginfo

LIBPYTHON = Path("/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0")
LIBPYTHON_FUNCTIONS = [
    "PyObject_GetAttr", "PyDict_GetItem", "PyList_Append", "PyLong_FromLong", "PyUnicode_FromString",
    "PyObject_Repr", "PyTuple_New", "PyNumber_Add", "PyObject_Hash", "PyDict_SetItem",
    "PyObject_GetAttr:3", "PyList_Append:4", "PyDict_SetItem%return",
]
KERNEL_FUNCTIONS = ["tcp_recvmsg", "do_sys_openat2", "vfs_read"]


def vars_text(info, spec: str) -> str:
    parsed = PointSpec.parse(spec)
    return format_points(parsed, info.probe_points(parsed), verbose=False)


@pytest.mark.perf
@pytest.mark.skipif(not LIBPYTHON.exists(), reason=f"{LIBPYTHON} (the pyenv build with DWARF5) is not here")
def test_libpython_vars_equal_perf(perf):
    info = open_debuginfo(binary=str(LIBPYTHON))
    compared = 0
    for spec in LIBPYTHON_FUNCTIONS:
        expected = perf_probe("-x", str(LIBPYTHON), "-V", spec)
        if expected.returncode == 0:
            assert vars_text(info, spec) == expected.stdout, spec
            compared += 1
    assert compared >= 10


@pytest.mark.skipif(not LIBPYTHON.exists(), reason=f"{LIBPYTHON} is not here")
def test_libpython_lines_without_source_still_numbered():
    """No CPython source on this machine: perf fails, we list the line numbers and say why."""
    info = open_debuginfo(binary=str(LIBPYTHON))
    text, note = render(info, find_line_range(info, LineSpec.parse("PyList_Append")))
    assert text.splitlines()[0] == "<PyList_Append@Objects/listobject.c:0>"
    assert [int(n) for n in text.splitlines()[1:]][:1] == [0]
    assert "source text not found for Objects/listobject.c" in note


@pytest.mark.vmlinux
@pytest.mark.perf
@pytest.mark.parametrize("function", KERNEL_FUNCTIONS)
def test_kernel_lines_and_vars_equal_perf(perf, kernel_debug, function):
    vmlinux, source = str(kernel_debug.vmlinux), str(kernel_debug.source)
    info = open_debuginfo(vmlinux=vmlinux, source_dir=source)
    expected = perf_probe("-k", vmlinux, "-s", source, "-L", function)
    assert expected.returncode == 0, expected.stderr
    text, note = render(info, find_line_range(info, LineSpec.parse(function)))
    assert text == expected.stdout and note is None
    expected = perf_probe("-k", vmlinux, "-V", function)
    assert expected.returncode == 0, expected.stderr
    assert vars_text(info, function) == expected.stdout


@pytest.mark.vmlinux
@pytest.mark.perf
def test_kernel_line_points_ranges_and_externs_equal_perf(perf, kernel_debug):
    vmlinux, source = str(kernel_debug.vmlinux), str(kernel_debug.source)
    info = open_debuginfo(vmlinux=vmlinux, source_dir=source)
    for spec in ["tcp_recvmsg:10", "vfs_read:12", "do_sys_openat2:16", "do_sys_openat2:21", "vfs_read%return"]:
        expected = perf_probe("-k", vmlinux, "-V", spec)
        assert expected.returncode == 0, (spec, expected.stderr)
        assert vars_text(info, spec) == expected.stdout, spec
    expected = perf_probe("-k", vmlinux, "-V", "vfs_read", "--externs")
    parsed = PointSpec.parse("vfs_read")
    assert format_points(parsed, info.probe_points(parsed, externs=True), verbose=False) == expected.stdout
    expected = perf_probe("-k", vmlinux, "-s", source, "-L", "tcp_recvmsg:3-12")
    text, _ = render(info, find_line_range(info, LineSpec.parse("tcp_recvmsg:3-12")))
    assert text == expected.stdout


@pytest.mark.vmlinux
@pytest.mark.perf
def test_kernel_vars_list_the_copies_in_every_unit_as_perf_does(perf, kernel_debug):
    """audit_cb is a static function of five files, read_cr3_pa a header's inline with an out-of-line
    copy: perf lists every unit's (we listed only the first), and so must a seeded random sample."""
    import random

    vmlinux = str(kernel_debug.vmlinux)
    info = open_debuginfo(vmlinux=vmlinux)
    names = sorted({name for name, _ in info.symbols.names() if name.isidentifier()})
    sample = ["audit_cb", "read_cr3_pa", *random.Random(12).sample(names, 8)]
    compared = 0
    for function in sample:
        expected = perf_probe("-k", vmlinux, "-V", function)
        if expected.returncode != 0:
            continue
        assert vars_text(info, function) == expected.stdout, function
        compared += 1
    assert compared >= 8
    assert vars_text(info, "audit_cb").count("@<audit_cb+0>") == 5


def test_vmlinux_tests_skip_with_a_reason_when_asked(monkeypatch):
    from kernel_debug import SKIP_ENV, skip_reason

    monkeypatch.setenv(SKIP_ENV, "1")
    assert SKIP_ENV in skip_reason() and "633 MB" in skip_reason()
