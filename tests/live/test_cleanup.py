"""Never leave a probe behind: a real kprobe-tui process is ended every way it can end."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from test_uprobes import build, top  # noqa: F401  (top is a fixture)

from kprobe_tui.cli import main as cli_main
from kprobe_tui.kernel import lifetime
from kprobe_tui.kernel.events import OTHER_RUN, Events

pytestmark = pytest.mark.live

# A run that creates what the TUI creates: its own trace instance and a probe enabled in it.
RUN = """
import sys, time
from pathlib import Path
from kprobe_tui.kernel import lifetime
from kprobe_tui.kernel.events import Events
from kprobe_tui.kernel.instance import Instance
from kprobe_tui.kernel.tracefs import Tracefs
from kprobe_tui.probes.compile import compile_spec
from kprobe_tui.probes.spec import parse_spec

top = Tracefs(Path(sys.argv[1]))
instance = Instance(top)
instance.create()
probes = compile_spec(parse_spec(["add3", "$arg1"], binary=sys.argv[2], filter="arg1 > 1"), lifetime.run_name())
[event] = Events(top).create(probes, run_scoped=True)
instance.enable(event.group, event.event)
if sys.argv[3] == "pin":
    Events(top).pin(event)
print("ready", flush=True)
if sys.argv[3] == "raise":
    raise RuntimeError("an unhandled exception")
if sys.argv[3] == "wait":
    time.sleep(120)
"""


def start_run(tracefs_root: Path, binary: Path, mode: str) -> subprocess.Popen:
    process = subprocess.Popen(
        [sys.executable, "-c", RUN, str(tracefs_root), str(binary), mode],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert process.stdout.readline().strip() == "ready", process.stderr.read()
    return process


def leftovers(tracefs_root: Path, pid: int) -> tuple[bool, bool]:
    """Whether the run's probe group, and its instance, are still in the kernel."""
    name = f"{lifetime.RUN_PREFIX}{pid}"
    return f"{name}/" in (tracefs_root / "uprobe_events").read_text(), (tracefs_root / "instances" / name).exists()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_signals_remove_everything_the_run_created(top, tracefs_root, tmp_path, signum):  # noqa: F811
    binary = build("basic.c", tmp_path / "basic", "-O2")
    process = start_run(tracefs_root, binary, "wait")
    try:
        assert leftovers(tracefs_root, process.pid) == (True, True)
        group = f"{lifetime.RUN_PREFIX}{process.pid}"
        # a live run is someone else's: cleanup leaves it alone
        assert {e.owner for e in Events(top).events_in(group)} == {OTHER_RUN}
        instances, removed = Events(top).cleanup()
        assert group not in instances and group not in {e.group for e in removed}
        assert leftovers(tracefs_root, process.pid) == (True, True)
        process.send_signal(signum)
        process.wait(timeout=30)
    finally:
        process.kill()
    assert leftovers(tracefs_root, process.pid) == (False, False), process.stderr.read()


@pytest.mark.parametrize("mode", ["exit", "raise"])
def test_normal_exit_and_unhandled_exception_remove_everything(top, tracefs_root, tmp_path, mode):  # noqa: F811
    binary = build("basic.c", tmp_path / "basic", "-O2")
    process = start_run(tracefs_root, binary, mode)
    process.wait(timeout=30)
    assert (process.returncode != 0) == (mode == "raise")
    assert leftovers(tracefs_root, process.pid) == (False, False), process.stderr.read()


def test_sigkill_leaves_a_stale_run_that_cleanup_removes(top, tracefs_root, tmp_path, capsys):  # noqa: F811
    binary = build("basic.c", tmp_path / "basic", "-O2")
    process = start_run(tracefs_root, binary, "wait")
    process.kill()
    process.wait(timeout=30)
    name = f"{lifetime.RUN_PREFIX}{process.pid}"
    try:
        assert leftovers(tracefs_root, process.pid) == (True, True)  # SIGKILL: nothing could run
        events = Events(top)
        assert name in events.stale_groups() and name in events.stale_instances()
        assert cli_main(["list", f"{name}/*"]) == 0
        assert capsys.readouterr().out.startswith(f"! p:{name}/add3")
        assert cli_main(["cleanup", "--dry-run"]) == 0
        assert f"would remove {name}/add3" in capsys.readouterr().out
        assert leftovers(tracefs_root, process.pid) == (True, True)
    finally:
        code = cli_main(["cleanup"])
    out = capsys.readouterr().out
    assert code == 0 and f"removed instance {name}" in out and f"removed {name}/add3" in out
    assert leftovers(tracefs_root, process.pid) == (False, False)
    assert name not in Events(top).stale_groups()


def test_a_pinned_probe_outlives_the_run_until_del(top, tracefs_root, tmp_path, capsys):  # noqa: F811
    binary = build("basic.c", tmp_path / "basic", "-O2")
    process = start_run(tracefs_root, binary, "pin")
    process.wait(timeout=30)
    try:
        assert process.returncode == 0, process.stderr.read()
        assert leftovers(tracefs_root, process.pid) == (False, False)  # the run's own group and instance: gone
        assert "p:kprobe_tui/add3 " in top.read("uprobe_events")  # the pinned probe: kept, filter and all
        assert top.read("events/kprobe_tui/add3/filter").strip() == "arg1 > 1"
    finally:
        assert cli_main(["del", "kprobe_tui/add3"]) == 0
    assert "removed kprobe_tui/add3" in capsys.readouterr().out
