"""Host side: the snapshots captured in the 6.1 and 6.12 guests (``harness.py snapshots``) read offline.

The oracle is the raw kernel files inside each archive: whatever kprobe-tui says through
``--snapshot`` must agree with the blacklist and ftrace list the kernel itself wrote.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tarfile

import pytest
from harness import KERNELS, PROJECT, SNAPSHOTS


@pytest.fixture(params=sorted(KERNELS), scope="module")
def snapshot(request):
    path = SNAPSHOTS / f"{request.param}.tar.gz"
    assert path.exists(), f"recapture with: python tests/kernel/harness.py snapshots ({path} missing)"
    return path


def _member(path, name: str) -> str:
    with tarfile.open(path) as archive:
        return archive.extractfile(name).read().decode()


def _cli(snapshot, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "kprobe_tui", "--snapshot", str(snapshot), *args],
        cwd=PROJECT, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_snapshot_holds_a_kprobe_kernel(snapshot):
    manifest = json.loads(_member(snapshot, "manifest.json"))
    series = "6.12." if "6.12" in snapshot.name else "6.1.0-"
    assert manifest["release"].startswith(series)
    readme = _member(snapshot, "tracefs/README")
    assert "p[:[<group>/][<event>]] <place> [<args>]" in readme


def test_doctor_offline_tells_the_kernels_apart(snapshot):
    out = _cli(snapshot, "doctor")
    assert "a captured snapshot" in out
    mark = "ok" if "6.12" in snapshot.name else "--"
    assert re.search(rf"\[{mark}\] fprobe events", out)
    assert re.search(rf"\[{mark}\] BTF argument names", out)
    assert re.search(r"\[ok\] kprobe blacklist", out)


def test_funcs_offline_agrees_with_the_captured_kernel_lists(snapshot):
    status = {}
    for line in _cli(snapshot, "funcs", "--all").splitlines():
        name, state, _ = line.split("\t", 2)
        status[name] = state
    blacklist = [line.split("\t")[1] for line in _member(snapshot, "debugfs/kprobes/blacklist").splitlines()]
    listed = [n for n in blacklist if n in status]
    assert len(listed) > 300 and all(status[n] == "blacklisted" for n in listed)
    ftrace = {line.split(" ", 1)[0] for line in _member(snapshot, "tracefs/available_filter_functions").splitlines()}
    assert {status[n] for n in ftrace if n in status} <= {"ftrace", "blacklisted", "ambiguous", "clone"}
    assert status["do_sys_openat2"] == "ftrace"


def test_btf_prototype_offline(snapshot):
    (record,) = [json.loads(line) for line in _cli(snapshot, "funcs", "--json", "vfs_open").splitlines()
                 if json.loads(line)["name"] == "vfs_open"]
    assert record["prototype"] == "int vfs_open(const struct path *path, struct file *file)"
