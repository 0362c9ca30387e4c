"""Kernel modules in a running kernel: 9p and virtio, which the harness loads for the guest's root filesystem.

Their debug files are Debian's (linux-image-<release>-dbg, kept by tests/debuginfo/kernel_debug.py);
bind-mounted over /usr/lib/debug in the guest, they are where a Debian user has them, and
kprobe-tui finds them by the loaded modules' build-ids. perf reads them by path (-m FILE): in the
guest /lib/modules has no modules for perf to resolve a name with.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from guestlib import Tail, run_cli
from harness import PROJECT

from kprobe_tui.kernel.events import Events

sys.path.insert(0, str(PROJECT / "tests" / "debuginfo"))
from kernel_debug import CACHE_DIR, module_debug_files, module_debug_root  # noqa: E402

pytestmark = pytest.mark.kernel

GROUP = "kprobe_tui"  # these tests' `kprobe-tui probe -g GROUP` makes persistent probes here
RELEASE = os.uname().release
SOURCE = CACHE_DIR / "linux-source-6.1"


@pytest.fixture(scope="module")
def debug_tree():
    """The cached debug tree mounted over /usr/lib/debug (this guest only), unmounted after."""
    files = module_debug_files(RELEASE)
    if not all(path.exists() for path in files):
        pytest.skip(f"no debug files for {RELEASE}'s modules in {module_debug_root()}: tests/debuginfo/kernel_debug.py "
                    "keeps those of the 6.1 kernel the guests boot (run it on the host)")
    subprocess.run(["mount", "--bind", str(module_debug_root()), "/usr/lib/debug"], check=True)
    try:
        yield dict(zip(("9p", "virtio"), files))
    finally:
        subprocess.run(["umount", "/usr/lib/debug"], check=True)


@pytest.fixture
def ours(tracefs):
    """Probes the test makes in kprobe-tui's persistent group are removed, whatever happens."""
    yield
    events = Events(tracefs)
    for event in events.events_in(GROUP):
        events.delete(event)


def cli(*args: str) -> str:
    result = run_cli(*args)
    assert result.returncode == 0, result.stderr
    return result.stdout


def perf(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["perf", "probe", *args], capture_output=True, text=True, timeout=300)


def test_module_source_and_variables_equal_perf_m(debug_tree):
    """Found by name and build-id, read as perf reads the file: the same listing."""
    lines = cli("lines", "-m", "9p", "-s", str(SOURCE), "v9fs_file_read_iter")
    assert lines == perf("-m", str(debug_tree["9p"]), "-s", str(SOURCE), "-L", "v9fs_file_read_iter").stdout
    assert "     15  \tiocb->ki_pos += ret;" in lines
    listing = cli("vars", "-m", "9p", "v9fs_file_read_iter:15")
    assert listing == perf("-m", str(debug_tree["9p"]), "-V", "v9fs_file_read_iter:15").stdout
    assert "\t\tint\tret\n" in listing
    virtio = cli("lines", "-m", "virtio", "-s", str(SOURCE), "device_show")
    assert virtio == perf("-m", str(debug_tree["virtio"]), "-s", str(SOURCE), "-L", "device_show").stdout


def test_a_line_probe_inside_a_module_reads_what_the_read_returned(debug_tree, ours, tracefs, tmp_path):
    """Line 15 of v9fs_file_read_iter runs after a 9p read: ret is the bytes read. The project directory is a
    9p mount without cache, so dd reading a 54321-byte file there goes through it with ret 54321 (a size no
    other read in the guest has: Python reading the project's modules goes through it too)."""
    dry_run = perf("-n", "-v", "-m", str(debug_tree["9p"]), "-a", "v9fs_file_read_iter:15 ret")  # before ours: perf
    output = dry_run.stdout + dry_run.stderr  # refuses an event name that exists in any group
    written = [line.split("Writing event: ", 1)[1] for line in output.splitlines() if "Writing event: " in line]
    assert written, output
    created = cli("probe", "--json", "-g", GROUP, "-m", "9p", "v9fs_file_read_iter:15", "ret")
    definitions = [line.split('"definition": "', 1)[1].rstrip('",') for line in created.splitlines() if '"definition"' in line]
    # perf names its event probe/..., ours kprobe_tui/...: the places and fetch-args are the same
    assert [d.split(" ", 1)[1] for d in definitions] == [w.split(" ", 1)[1] for w in written]
    assert definitions[0].startswith(f"p:{GROUP}/v9fs_file_read_iter_L15 9p:v9fs_file_read_iter+")
    data = PROJECT / f".kptui-guest-read-{os.getpid()}"
    data.write_bytes(b"x" * 54321)
    tail = Tail(tracefs.root, [d.split(" ", 1)[0][2:] for d in definitions])
    try:
        tail.ready()
        subprocess.run(["dd", f"if={data}", "of=/dev/null", "bs=65536"], capture_output=True, check=True)
        event = tail.wait_for(lambda e: e["args"].get("ret") == 54321)[-1]
    finally:
        tail.stop(signal.SIGTERM)
        data.unlink()
    assert event["event"] == "v9fs_file_read_iter_L15" and event["args"] == {"ret": 54321}


def test_a_name_in_vmlinux_and_in_a_module_probes_the_modules_only(debug_tree, ours, tracefs):
    """device_show is drivers/pci's (vmlinux) and virtio's: -m virtio probes virtio's, which a read of a PCI
    device's attribute does not reach, and a virtio device's does."""
    created = cli("probe", "--explain", "-g", GROUP, "-m", "virtio", "device_show", "attr->attr.name:string")
    assert f"p:{GROUP}/device_show virtio:device_show+0 name=+0(+0(%si)):string" in created
    virtio_device = next(Path("/sys/bus/virtio/devices").iterdir()) / "device"
    pci_device = next(Path("/sys/bus/pci/devices").iterdir()) / "device"
    tail = Tail(tracefs.root, [f"{GROUP}/device_show"])
    try:
        tail.ready()
        for path in (pci_device, virtio_device):
            subprocess.run(["cat", str(path)], capture_output=True, check=True)
        # the PCI read came first: had it fired the probe, its event would be here too
        seen = tail.wait_for(lambda e: e["event"] == "device_show")
    finally:
        tail.stop(signal.SIGTERM)
    assert [(e["site"], e["args"]) for e in seen] == [("device_show+0x0/0x30 [virtio]", {"name": "device"})]
