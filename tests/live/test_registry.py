"""kprobe-tui knows which persistent probes it made without trusting their group's name (registry.py):
its probes in perf's own group are marked, perf's are not, and a record the kernel no longer bears out
(the event deleted and redefined by hand, another boot's, a file not root's) counts for nothing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_uprobes import build

from kprobe_tui.cli import main as cli_main
from kprobe_tui.kernel import lifetime
from kprobe_tui.kernel.events import OTHERS, PERSISTENT, Events
from kprobe_tui.kernel.tracefs import Tracefs
from kprobe_tui.probes.compile import compile_spec
from kprobe_tui.probes.spec import parse_spec

pytestmark = pytest.mark.live
GROUP = f"kptreg{os.getpid()}"  # a group of this test's own: others' tests run beside it
RECORDS = lifetime.LOCK_DIR / "made"


@pytest.fixture
def top(tracefs_root):
    """The live tracefs; whatever a failing test left in our group is removed."""
    tracefs = Tracefs(tracefs_root)
    yield tracefs
    events = Events(tracefs)
    for event in events.events_in(GROUP):
        events.delete(event)
    assert GROUP not in tracefs.read("uprobe_events")


@pytest.fixture
def binary(tmp_path) -> Path:
    return build("basic.c", tmp_path / "basic", "-O2")


def ours(top, name: str) -> str:
    return next(e.owner for e in Events(top).list() if e.full_name == f"{GROUP}/{name}")


def make(top, binary: Path, event: str):
    spec = parse_spec([f"{GROUP}:{event}=add3", "%di"], binary=str(binary))
    return Events(top).create(compile_spec(spec, GROUP, []))


def test_our_probe_is_ours_in_any_group_and_a_probe_beside_it_is_not(top, binary, capsys):
    make(top, binary, "mine")
    offset = next(line for line in top.read("uprobe_events").splitlines() if f"{GROUP}/mine " in line).split()[1]
    top.write("uprobe_events", f"p:{GROUP}/theirs {offset}\n")  # as perf or an admin makes one: not through us
    assert (ours(top, "mine"), ours(top, "theirs")) == (PERSISTENT, OTHERS)
    assert cli_main(["list", f"{GROUP}/*"]) == 0
    listed = capsys.readouterr().out
    assert f"+ p:{GROUP}/mine " in listed and f"  p:{GROUP}/theirs " in listed
    assert cli_main(["del", "mine", "theirs"]) == 2  # a bare name matches ours only: theirs is not found
    assert cli_main(["del", "mine"]) == 0
    assert f"{GROUP}/mine " not in top.read("uprobe_events") and f"{GROUP}/theirs " in top.read("uprobe_events")
    assert not (RECORDS / f"{GROUP}:mine").exists()


def test_an_event_redefined_by_hand_under_our_name_is_not_ours(top, binary):
    make(top, binary, "mine")
    top.write("uprobe_events", f"-:{GROUP}/mine\n")
    offset = int(subprocess.run(["nm", str(binary)], capture_output=True, text=True, check=True).stdout.split(" T negate")[0]
                 .rsplit("\n", 1)[-1], 16)
    top.write("uprobe_events", f"p:{GROUP}/mine {binary}:0x{offset:x}\n")
    assert ours(top, "mine") == OTHERS
    assert not (RECORDS / f"{GROUP}:mine").exists(), "a record the kernel does not bear out is removed"


def test_records_of_another_boot_or_not_roots_count_for_nothing(top, binary, tmp_path):
    make(top, binary, "mine")
    record = RECORDS / f"{GROUP}:mine"
    saved = json.loads(record.read_text())
    record.write_text(json.dumps({**saved, "boot": "another-boot"}))
    assert ours(top, "mine") == OTHERS
    make(top, binary, "again")
    nobody = 65534
    os.chown(RECORDS / f"{GROUP}:again", nobody, nobody)
    assert ours(top, "again") == OTHERS


def test_a_probe_pinned_from_a_run_is_recorded_as_ours(top, binary):
    """The builder's Pin re-creates a run's probe in a persistent group: kept, and still ours."""
    script = f"""
from pathlib import Path
from kprobe_tui.kernel import lifetime
from kprobe_tui.kernel.events import Events
from kprobe_tui.kernel.tracefs import Tracefs
from kprobe_tui.probes.compile import compile_spec
from kprobe_tui.probes.spec import parse_spec
top = Tracefs(Path({str(top.root)!r}))
[event] = Events(top).create(compile_spec(parse_spec(["add3"], binary={str(binary)!r}), lifetime.run_name()), run_scoped=True)
Events(top).pin(event, {GROUP!r})
"""
    subprocess.run([sys.executable, "-c", script], check=True)
    assert ours(top, "add3") == PERSISTENT


@pytest.mark.skipif(shutil.which("perf") is None, reason="perf is not installed")
def test_perfs_own_probe_in_perfs_group_is_not_ours(top, binary):
    made = subprocess.run(["perf", "probe", "-q", "-x", str(binary), f"{GROUP}:perfs=add3"], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    assert ours(top, "perfs") == OTHERS
