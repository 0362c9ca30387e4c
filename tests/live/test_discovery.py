"""Discovery, capabilities and the function catalog on this machine's real kernel (6.18, uprobes only)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

import pytest

from kprobe_tui.kernel import capabilities
from kprobe_tui.kernel.catalog import Catalog, Status
from kprobe_tui.kernel.sources import KernelSources, locate

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def sources() -> KernelSources:
    return locate()


@pytest.fixture(scope="module")
def catalog(sources) -> Catalog:
    return Catalog(sources)


def _kallsyms_text() -> list[tuple[str, str]]:
    rows = []
    with open("/proc/kallsyms") as handle:
        for line in handle:
            address, kind, name = line.split()[:3]
            if kind in "tT" and not name.startswith("__pfx_"):
                rows.append((address, name))
    return rows


def test_capabilities_match_the_files_of_this_kernel(sources):
    caps = capabilities.detect(sources)
    tracefs = sources.tracefs
    for key in ("kprobe_events", "uprobe_events", "dynamic_events", "error_log", "instances"):
        assert caps.has(key) == (tracefs / key).exists(), key
    readme = (tracefs / "README").read_text()
    assert caps.has("btf_args") == ("<argname>" in readme)
    assert caps.has("bitfield") == ("b<bit-width>@<bit-offset>/<container-size>" in readme)
    assert caps.has("write") and caps.can_probe_user


def test_doctor_explains_the_missing_kprobes():
    if os.path.exists("/sys/kernel/tracing/kprobe_events"):
        pytest.skip("this kernel has kprobes")
    out = subprocess.run([sys.executable, "-m", "kprobe_tui", "doctor"], capture_output=True, text=True, check=True).stdout
    line = next(line for line in out.splitlines() if "kernel probes (kprobe_events)" in line)
    assert line.lstrip().startswith("[--]")
    assert "built without CONFIG_KPROBES" in line and "user-space probes with -x BINARY work" in line
    assert "user-space probes (-x BINARY): yes" in out


def test_tracefs_is_mounted_when_missing():
    """In a private mount namespace without tracefs, discovery mounts it and says so."""
    script = (
        "umount /sys/kernel/tracing 2>/dev/null; umount /sys/kernel/debug 2>/dev/null; "
        f"{sys.executable} -m kprobe_tui doctor"
    )
    result = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "note: mounted tracefs at /sys/kernel/tracing" in result.stdout
    assert "[ok] tracefs" in result.stdout


def test_unreadable_ftrace_list_falls_back_to_kallsyms_once(sources, catalog):
    try:
        (sources.tracefs / "available_filter_functions").read_text()
        pytest.skip("available_filter_functions is readable here")
    except PermissionError:
        pass
    fallback = [note for note in catalog.notes if "available_filter_functions" in note]
    assert len(fallback) == 1 and "falling back to /proc/kallsyms" in fallback[0]
    status, reason = catalog.classify("vfs_read")
    if catalog.without_kprobes:  # what the kallsyms fallback says, beside why this kernel cannot use it
        assert status is Status.NO_KPROBES and reason.startswith("this kernel was built without kprobes")
        assert reason.endswith("With kprobes: in /proc/kallsyms; available_filter_functions is unreadable, so "
                               "whether it attaches through ftrace or a breakpoint is unknown")
    else:
        assert status is Status.PROBEABLE


def test_every_kallsyms_function_is_in_the_catalog(catalog):
    names = {name for _, name in _kallsyms_text()}
    assert names <= set(catalog.names)
    assert not any(name.startswith("__pfx_") for name in catalog.names)


def test_duplicate_names_are_ambiguous_with_every_address(catalog):
    counts = Counter(name for _, name in _kallsyms_text())
    duplicate = next(name for name, count in counts.items() if count > 1 and "." not in name)
    function = catalog.function(duplicate)
    assert function.status is Status.AMBIGUOUS
    assert len(function.symbols) == counts[duplicate]
    for address, name in _kallsyms_text():
        if name == duplicate:
            assert f"0x{int(address, 16):x}" in function.reason


def test_clones_name_their_source_function(catalog):
    clone = next(name for name in catalog.names if ".isra." in name and len(catalog.function(name).symbols) == 1)
    status, reason = catalog.classify(clone)
    assert status is (Status.NO_KPROBES if catalog.without_kprobes else Status.CLONE)
    assert f"compiler clone of {clone.split('.')[0]}()" in reason
    assert "IPA-SRA" in reason


def test_size_is_the_distance_to_the_next_text_symbol(catalog):
    rows = sorted((int(address, 16), name) for address, name in _kallsyms_text())
    with open("/proc/kallsyms") as handle:
        starts = sorted({int(line.split()[0], 16) for line in handle if line.split()[1] in "tT"})
    address = catalog.function("vfs_read").symbols[0].address
    following = next(start for start in starts if start > address)
    assert catalog.function("vfs_read").size == following - address
    assert rows


def test_non_root_user_is_told_it_is_read_only_and_addresses_are_hidden(sources):
    """A forked child drops to nobody: real permission checks, real zeroed kallsyms."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report what it found, or the error, through the pipe
        os.close(read)
        verdict = "child failed"
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            caps = capabilities.detect(locate(mount=False))
            catalog = Catalog(locate(mount=False))
            verdict = "|".join([
                str(caps.has("write")), caps.items["write"].detail,
                str(caps.has("kallsyms_addresses")), " ".join(catalog.notes),
                catalog.status("vfs_read").value, caps.items["kprobe_events"].detail,
            ])
        except BaseException as exc:
            verdict = f"child raised {exc!r}"
        finally:
            os.write(write, verdict.encode())
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        verdict = pipe.read()
    os.waitpid(pid, 0)
    assert verdict.count("|") == 5, verdict
    can_write, write_detail, addresses, notes, vfs_read, kprobes = verdict.split("|")
    assert kprobes == "unknown: tracefs is not accessible to this user (uid 65534)"
    assert can_write == "False"
    assert "uid 65534" in write_detail and "cannot write the probe files" in write_detail
    assert addresses == "False"
    assert "zero addresses" in notes
    assert vfs_read in ("hidden", "probeable", "ftrace", "breakpoint")


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kprobe_tui", *args], capture_output=True, text=True)


def test_a_snapshot_of_this_machine_lists_what_the_live_kernel_lists(tmp_path):
    archive = tmp_path / "here.tar.xz"
    made = _cli("snapshot", str(archive))
    assert made.returncode == 0, made.stderr
    assert f"wrote {archive}" in made.stdout
    live = _cli("funcs", "--all", "vfs_").stdout
    offline = _cli("--snapshot", str(archive), "funcs", "--all", "vfs_").stdout
    assert live == offline and "vfs_read\t" in live


def test_offline_flags_point_every_reader_at_copies(tmp_path):
    """--tracefs/--debugfs/--kallsyms/--btf on an unpacked real snapshot (Debian 6.1)."""
    from pathlib import Path

    from kprobe_tui.kernel.snapshot import unpack

    with open(Path(__file__).parents[1] / "fixtures" / "snapshots" / "debian-6.1.tar.gz", "rb") as archive:
        unpack(archive, tmp_path)  # Python 3.11.2's extractall() has no filter=
    flags = ["--tracefs", str(tmp_path / "tracefs"), "--debugfs", str(tmp_path / "debugfs"),
             "--kallsyms", str(tmp_path / "proc" / "kallsyms"), "--btf", str(tmp_path / "btf" / "vmlinux")]
    rows = _cli(*flags, "funcs", "--all", "do_int3").stdout
    assert rows.startswith("do_int3\tblacklisted\t")
    doctor = _cli(*flags, "doctor").stdout
    assert "[ok] kernel probes (kprobe_events)" in doctor and "[ok] kprobe blacklist" in doctor


def test_version_and_help():
    assert _cli("--version").stdout.startswith("kprobe-tui ")
    helptext = _cli("--help").stdout
    for command in ("funcs", "doctor", "snapshot"):
        assert command in helptext
