"""The function catalog on real data captured from Debian's 6.1 and 6.12 kernels (tests/fixtures/snapshots)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from kprobe_tui.kernel import capabilities
from kprobe_tui.kernel.catalog import Catalog, Status
from kprobe_tui.kernel.snapshot import open_snapshot
from kprobe_tui.kernel.sources import KernelSources

SNAPSHOTS = Path(__file__).parents[1] / "fixtures" / "snapshots"
KERNELS = ["debian-6.1", "debian-6.12"]
VFS_READ = "ssize_t vfs_read(struct file *file, char *buf, size_t count, loff_t *pos)"


@pytest.fixture(scope="module", params=KERNELS)
def snapshot(request) -> KernelSources:
    return open_snapshot(SNAPSHOTS / f"{request.param}.tar.gz")


@pytest.fixture(scope="module")
def catalog(snapshot) -> Catalog:
    return Catalog(snapshot)


def _blacklist(sources: KernelSources) -> list[str]:
    return [line.split("\t")[1] for line in sources.blacklist.read_text().splitlines()]


def _kallsyms_functions(sources: KernelSources) -> list[tuple[int, str, str]]:
    rows = []
    for line in sources.kallsyms.read_text().splitlines():
        parts = line.split()
        if parts[1] in "tT" and not parts[2].startswith("__pfx_"):
            rows.append((int(parts[0], 16), parts[2], parts[3].strip("[]") if len(parts) > 3 else ""))
    return rows


def _ftrace(sources: KernelSources) -> set[str]:
    return {line.split()[0] for line in (sources.tracefs / "available_filter_functions").read_text().splitlines()}


def test_every_blacklisted_name_is_refused(snapshot, catalog):
    names = _blacklist(snapshot)
    assert "do_int3" in names and len(names) > 100
    for name in names:
        if name in catalog._symbols:
            status, reason = catalog.classify(name)
            assert status is Status.BLACKLISTED, name
            assert "kprobe blacklist" in reason and "refuses" in reason


def test_ftrace_list_separates_cheap_probes_from_breakpoint_only(snapshot, catalog):
    ftrace = _ftrace(snapshot)
    blacklisted = set(_blacklist(snapshot))
    counts = Counter(name for _, name, _ in _kallsyms_functions(snapshot))
    plain = [name for name in counts if counts[name] == 1 and "." not in name and name not in blacklisted]
    notrace = next(name for name in plain if name not in ftrace)
    traced = next(name for name in plain if name in ftrace)
    assert catalog.status(traced) is Status.FTRACE
    assert catalog.status(notrace) is Status.BREAKPOINT
    assert "int3 breakpoint" in catalog.classify(notrace)[1]
    assert not [note for note in catalog.notes if "falling back" in note]


def test_ambiguous_names_list_every_address_and_module(snapshot, catalog):
    rows = _kallsyms_functions(snapshot)
    counts = Counter(name for _, name, _ in rows)
    blacklisted = set(_blacklist(snapshot))
    name = next(n for n, c in counts.items() if c > 1 and "." not in n and n not in blacklisted)
    function = catalog.function(name)
    assert function.status is Status.AMBIGUOUS
    for address, other, module in rows:
        if other == name:
            assert f"0x{address:x}" + (f" [{module}]" if module else "") in function.reason


def test_clones_explain_what_probing_them_means(catalog):
    name = next(n for n in catalog.names if n.endswith(".constprop.0") and catalog.status(n) is Status.CLONE)
    reason = catalog.classify(name)[1]
    assert reason.startswith(f"compiler clone of {name.split('.')[0]}()") and "constant-propagated" in reason


def test_prototypes_come_from_btf_including_module_btf(snapshot, catalog):
    assert catalog.function("vfs_read").prototype == VFS_READ
    module_function = next(
        name for _, name, module in _kallsyms_functions(snapshot)
        if module == "9pnet" and catalog.status(name) is Status.FTRACE and name.startswith("p9_client_")
    )
    function = catalog.function(module_function)
    assert function.module == "9pnet"
    assert function.prototype and f"{module_function}(" in function.prototype
    assert "p9_client" in function.prototype


def test_capabilities_of_each_kernel(snapshot):
    caps = capabilities.detect(snapshot)
    assert caps.has("kprobe_events") and caps.has("blacklist") and caps.has("ftrace_list")
    assert not caps.has("write")  # a snapshot is read-only
    newer = snapshot.release.startswith("6.12")
    assert caps.has("fprobe") == newer
    assert caps.has("btf_args") == newer
    assert caps.has("return_args") == newer


def _copy(snapshot: KernelSources, tmp_path: Path) -> KernelSources:
    root = tmp_path / "copy"
    shutil.copytree(snapshot.tracefs.parent, root)
    return KernelSources(root / "tracefs", root / "debugfs", root / "proc" / "kallsyms", root / "btf", live=False)


def test_garbage_lines_are_counted_and_the_rest_still_works(snapshot, tmp_path):
    sources = _copy(snapshot, tmp_path)
    with open(sources.kallsyms, "a") as handle:
        handle.write("not a symbol line\nzzzz T bad_address\n\x00\x01binary\n")
    with open(sources.blacklist, "a") as handle:
        handle.write("garbage-without-addresses\tfoo\n0xZZ-0x10\tbar\n")
    catalog = Catalog(sources)
    assert "kallsyms: skipped 3 malformed line(s)" in catalog.notes
    assert "kprobe blacklist: skipped 2 malformed line(s)" in catalog.notes
    assert catalog.status("do_int3") is Status.BLACKLISTED
    assert catalog.function("vfs_read").prototype == VFS_READ


def test_blacklist_ranges_cover_aliases(snapshot, tmp_path):
    """A range entry blacklists every symbol inside it, whatever its name (as kernels list sections)."""
    sources = _copy(snapshot, tmp_path)
    address = next(address for address, name, _ in _kallsyms_functions(snapshot) if name == "vfs_read")
    with open(sources.blacklist, "a") as handle:
        handle.write(f"0x{address - 0x10:x}-0x{address + 0x10:x}\tsection_start\n")
    status, reason = Catalog(sources).classify("vfs_read")
    assert status is Status.BLACKLISTED and f"inside section_start 0x{address - 0x10:x}" in reason


def test_broken_btf_is_a_note_not_a_crash(snapshot, tmp_path):
    sources = _copy(snapshot, tmp_path)
    blob = sources.btf_vmlinux.read_bytes()
    sources.btf_vmlinux.write_bytes(blob[: len(blob) // 3])
    catalog = Catalog(sources)
    function = catalog.function("vfs_read")
    assert function.prototype is None and function.status is Status.FTRACE
    assert any(note.startswith("BTF: ") and "vmlinux" in note for note in catalog.notes)


def test_hidden_addresses_and_no_lists_make_functions_unknown(snapshot, tmp_path):
    """What a non-root user sees: kallsyms addresses zeroed, ftrace list and blacklist unreadable."""
    sources = _copy(snapshot, tmp_path)
    text = sources.kallsyms.read_text().splitlines()
    sources.kallsyms.write_text("".join("0" * 16 + line[16:] + "\n" for line in text))
    (sources.tracefs / "available_filter_functions").unlink()
    shutil.rmtree(sources.debugfs)
    sources.debugfs = None
    catalog = Catalog(sources)
    status, reason = catalog.classify("vfs_read")
    assert status is Status.HIDDEN and "cannot be told" in reason
    assert any("zero addresses" in note for note in catalog.notes)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kprobe_tui", *args], capture_output=True, text=True)


def test_funcs_lists_probeable_by_default_and_explains_with_all():
    snapshot = str(SNAPSHOTS / "debian-6.1.tar.gz")
    assert "do_int3" not in _cli("--snapshot", snapshot, "funcs", "do_int*").stdout.split()
    assert "vfs_read" in _cli("--snapshot", snapshot, "funcs", "vfs_rea").stdout.split()
    every = _cli("--snapshot", snapshot, "funcs", "--all", "do_int3").stdout.splitlines()
    assert any(line.startswith("do_int3\tblacklisted\t") for line in every)
    rows = [json.loads(line) for line in _cli("--snapshot", snapshot, "funcs", "--json", "vfs_read").stdout.splitlines()]
    vfs_read = next(row for row in rows if row["name"] == "vfs_read")
    assert vfs_read["status"] == "ftrace" and vfs_read["prototype"] == VFS_READ
    assert vfs_read["address"].startswith("0xffffffff") and vfs_read["size"] > 0
    assert {"name", "module", "address", "status", "reason", "prototype"} <= set(vfs_read)


def test_bad_snapshot_is_a_clear_error(tmp_path):
    broken = tmp_path / "broken.tar.gz"
    broken.write_bytes(b"not an archive")
    result = _cli("--snapshot", str(broken), "funcs")
    assert result.returncode == 2
    assert f"snapshot {broken} is corrupt: not a .tar.gz or .tar.xz archive" in result.stderr
    assert "Traceback" not in result.stderr


def test_init_code_freed_after_boot_is_never_offered(snapshot, catalog):
    """__init functions stay in kallsyms after the kernel frees them: between _sinittext and _einittext they are
    FREED, with the reason, refused as a probe and left out of ``probe -F`` as perf leaves them out."""
    rows = _kallsyms_functions(snapshot)
    marks = {name: address for address, name, _ in rows if name in ("_sinittext", "_einittext")}
    inside = sorted(name for address, name, module in rows
                    if not module and marks["_sinittext"] <= address < marks["_einittext"] and name in catalog._symbols)
    assert "aio_setup" in inside and "start_kernel" in inside
    assert all(catalog.status(name) is Status.FREED for name in inside if len(catalog._symbols[name]) == 1)
    assert "freed" in catalog.classify("aio_setup")[1] and not Status.FREED.probeable
    assert catalog.status("aio_read") is Status.FTRACE


def test_probe_funcs_and_probe_leave_init_code_out():
    """``probe -F '*aio*'`` is perf's list on Debian 6.1 (22 names: no aio_setup); probing aio_setup says why not."""
    offline = ["--snapshot", str(SNAPSHOTS / "debian-6.1.tar.gz")]
    listed = _cli(*offline, "probe", "--funcs", "*aio*")
    assert listed.returncode == 0 and len(listed.stdout.split()) == 22 and "aio_setup" not in listed.stdout.split()
    refused = _cli(*offline, "probe", "-n", "aio_setup")
    assert refused.returncode == 254 and "freed it" in refused.stderr
