"""Discovery on real kprobe kernels: doctor, the function catalog against the kernel's own lists, BTF prototypes."""

from __future__ import annotations

import os
import re

import pytest
from guestlib import run_cli

from kprobe_tui.kernel.btf import Btf
from kprobe_tui.kernel.capabilities import detect
from kprobe_tui.kernel.catalog import Catalog, Status

pytestmark = pytest.mark.kernel

IS_612 = os.uname().release.startswith("6.12.")


@pytest.fixture(scope="module")
def catalog(guest_sources) -> Catalog:
    return Catalog(guest_sources)


def test_doctor_reports_what_each_kernel_has():
    result = run_cli("doctor")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "kernel probes: yes" in out
    assert re.search(r"\[ok\] kernel probes \(kprobe_events\)", out)
    assert re.search(r"\[ok\] kprobe blacklist", out)
    assert re.search(r"\[ok\] kernel BTF", out)
    # Debian 6.12 has CONFIG_FPROBE_EVENTS and CONFIG_PROBE_EVENTS_BTF_ARGS; 6.1 has neither.
    mark = "ok" if IS_612 else "--"
    assert re.search(rf"\[{mark}\] fprobe events", out)
    assert re.search(rf"\[{mark}\] BTF argument names", out)


def test_capabilities_match_the_tracefs_files(guest_sources):
    caps = detect(guest_sources)
    assert caps.can_probe_kernel
    assert caps.has("ftrace_list") and caps.has("blacklist") and caps.has("kallsyms_addresses")
    assert caps.has("fprobe") == IS_612 and caps.has("btf_args") == IS_612


def _blacklist_entries(guest_sources) -> list[str]:
    """Names straight from the kernel's blacklist file (an oracle independent of the catalog's parser)."""
    lines = guest_sources.blacklist.read_text().splitlines()
    return [line.split("\t")[1] for line in lines if "\t" in line]


def test_catalog_flags_every_blacklisted_function(catalog, guest_sources):
    known = set(catalog.names)
    names = [n for n in _blacklist_entries(guest_sources) if n in known]
    assert len(names) > 300
    wrong = [n for n in names if catalog.status(n) is not Status.BLACKLISTED]
    assert not wrong


def test_catalog_ftrace_status_matches_available_filter_functions(catalog, guest_sources):
    listed = guest_sources.tracefs.joinpath("available_filter_functions").read_text().splitlines()
    ftrace_names = {line.split(" ", 1)[0] for line in listed}
    assert len(ftrace_names) > 30000
    # every 97th name: a spread across the list, cheap in a TCG guest
    for name in sorted(ftrace_names)[::97]:
        status = catalog.status(name)
        assert status in (Status.FTRACE, Status.BLACKLISTED, Status.AMBIGUOUS, Status.CLONE), (name, status)
    assert catalog.status("do_sys_openat2") is Status.FTRACE


def test_catalog_functions_outside_ftrace_are_breakpoint_only(catalog, guest_sources):
    listed = guest_sources.tracefs.joinpath("available_filter_functions").read_text()
    ftrace_names = {line.split(" ", 1)[0] for line in listed.splitlines()}
    outside = [n for n in catalog.names[::53] if n not in ftrace_names and catalog.status(n) is Status.BREAKPOINT]
    assert outside, "a kernel always has notrace functions"


def test_btf_prototypes_from_the_running_kernel(guest_sources):
    btf = Btf.load(guest_sources.btf_vmlinux)
    # fs/open.c in both 6.1 and 6.12; BTF spells long as "long int" and drops __user
    expected = "long int do_sys_openat2(int dfd, const char *filename, struct open_how *how)"
    assert btf.prototype("do_sys_openat2") == expected
    assert btf.prototype("vfs_open") == "int vfs_open(const struct path *path, struct file *file)"
    assert [p.name for p in btf.params("do_sys_openat2")] == ["dfd", "filename", "how"]


def test_funcs_lists_probeable_and_explains_blacklisted(guest_sources):
    result = run_cli("funcs", "do_sys_open*")
    assert result.returncode == 0, result.stderr
    assert "do_sys_openat2" in result.stdout.split()
    blacklisted = _blacklist_entries(guest_sources)[0]
    result = run_cli("funcs", "--all", blacklisted)
    row = next(line for line in result.stdout.splitlines() if line.split("\t")[0] == blacklisted)
    assert row.split("\t")[1] == "blacklisted"
