"""Liveness across PID namespaces (issue 15, item 12): a run under ``unshare --pid`` and a run on the
host never take each other's live probes and instances for stale, dead ones are cleaned from where
they can be judged, and two runs with the same PID in two namespaces get two names.

Each run is a real process that makes what the TUI makes (a run-scoped uprobe, enabled in the run's
own trace instance), started on the host or with ``unshare --pid --fork --mount-proc``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from test_uprobes import build, top  # noqa: F401  (top is a fixture)

from kprobe_tui.kernel import lifetime
from kprobe_tui.kernel.events import OTHER_RUN, STALE, Events
from kprobe_tui.kernel.tracefs import Tracefs
from kprobe_tui.probes.symbols import ElfSymbols

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (util-linux)"),
]

PROJECT = Path(__file__).parents[2]
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
probes = compile_spec(parse_spec(["add3", "$arg1"], binary=sys.argv[2]), lifetime.run_name())
[event] = Events(top).create(probes, run_scoped=True)
instance.enable(event.group, event.event)
print("ready", lifetime.run_name(), flush=True)
time.sleep(120)
"""
IN_NAMESPACE = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]


class Run:
    """A kprobe-tui run, on the host or in a PID namespace of its own; ``name`` is what it calls itself."""

    def __init__(self, tracefs_root: Path, binary: Path, namespace: bool) -> None:
        command = [sys.executable, "-c", RUN, str(tracefs_root), str(binary)]
        self.process = subprocess.Popen(IN_NAMESPACE + command if namespace else command, cwd=PROJECT,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ready = self.process.stdout.readline().split()
        if ready[:1] != ["ready"]:
            self.process.kill()
            pytest.fail(f"the run did not start: {self.process.communicate()[1]}")
        self.name = ready[1]
        self.root = tracefs_root

    def leftovers(self) -> tuple[bool, bool]:
        """Whether its probe group and its instance are in the kernel."""
        return (f"{self.name}/add3 " in (self.root / "uprobe_events").read_text(),
                (self.root / "instances" / self.name).exists())

    def kill(self) -> None:
        """SIGKILL to the run itself (in a namespace: unshare's child), and wait until it is gone."""
        try:
            processes = [psutil.Process(self.process.pid), *psutil.Process(self.process.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            processes = []
        for process in reversed(processes):
            process.kill()
        psutil.wait_procs(processes, timeout=30)
        self.process.wait(timeout=30)


def kprobe_tui(*args: str, namespace: bool = False) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "kprobe_tui", *args]
    return subprocess.run(IN_NAMESPACE + command if namespace else command, cwd=PROJECT, capture_output=True,
                          text=True, timeout=120)


@pytest.fixture
def binary(tmp_path) -> Path:
    return build("basic.c", tmp_path / "basic", "-O2")


@pytest.fixture
def runs(tracefs_root):
    """Started runs; whatever a test leaves is killed and its objects removed by hand at the end."""
    started: list[Run] = []
    yield started
    tracefs = Tracefs(tracefs_root)  # not "top": that name is the fixture imported above
    for run in started:
        run.kill()
        if (tracefs_root / "instances" / run.name).exists():
            os.rmdir(tracefs_root / "instances" / run.name)
        if run.leftovers()[0]:
            tracefs.write("uprobe_events", f"-:{run.name}/add3\n")
        lifetime.forget(run.name)


def test_a_run_in_a_namespace_is_alive_for_the_host_and_cleaned_by_it_once_killed(top, tracefs_root, binary, runs):  # noqa: F811
    run = Run(tracefs_root, binary, namespace=True)
    runs.append(run)
    assert run.name.startswith("kptui_1")  # PID 1 in its namespace: the host's PID 1 is init
    assert {e.owner for e in Events(top).events_in(run.name)} == {OTHER_RUN}
    deleted = kprobe_tui("del", "add3")  # a bare event glob: only kprobe-tui's own and stale groups
    assert deleted.returncode == 2 and "no matching event" in deleted.stderr
    assert kprobe_tui("cleanup").returncode == 0
    assert run.leftovers() == (True, True)

    run.kill()
    assert {e.owner for e in Events(top).events_in(run.name)} == {STALE}
    cleaned = kprobe_tui("cleanup")
    assert f"removed instance {run.name}" in cleaned.stdout and f"removed {run.name}/add3" in cleaned.stdout
    assert run.leftovers() == (False, False)
    assert lifetime.lock_state(run.name) == lifetime.ABSENT  # its lock file went with it


def test_a_host_run_is_alive_for_a_run_in_a_namespace(top, tracefs_root, binary, runs):  # noqa: F811
    run = Run(tracefs_root, binary, namespace=False)
    runs.append(run)
    listed = kprobe_tui("list", f"{run.name}/*", namespace=True)
    assert listed.stdout.startswith(f"~ p:{run.name}/add3"), listed.stdout  # another running kprobe-tui
    deleted = kprobe_tui("del", "add3", namespace=True)
    assert deleted.returncode == 2 and "no matching event" in deleted.stderr
    cleaned = kprobe_tui("cleanup", namespace=True)
    assert cleaned.returncode == 0 and run.name not in cleaned.stdout, cleaned.stderr
    assert run.leftovers() == (True, True)

    run.kill()
    cleaned = kprobe_tui("cleanup", namespace=True)  # the lock is on /run, shared: a dead run is dead everywhere
    assert f"removed instance {run.name}" in cleaned.stdout, cleaned.stderr
    assert run.leftovers() == (False, False)


def test_two_runs_with_the_same_pid_in_two_namespaces_get_two_names(top, tracefs_root, binary, runs):  # noqa: F811
    first = Run(tracefs_root, binary, namespace=True)
    runs.append(first)
    second = Run(tracefs_root, binary, namespace=True)
    runs.append(second)
    assert first.name != second.name and {first.name, second.name} <= {"kptui_1", *(f"kptui_1_{n}" for n in range(1, 9))}
    assert first.leftovers() == second.leftovers() == (True, True)
    assert {e.owner for name in (first.name, second.name) for e in Events(top).events_in(name)} == {OTHER_RUN}


def test_old_style_names_are_judged_by_pid_only_where_every_pid_is_visible(top, tracefs_root, binary):  # noqa: F811
    """``kptui_<pid>`` left by an older kprobe-tui (no lock file): the host, which sees every PID, cleans it;
    a namespace, which cannot tell a dead PID from one it cannot see, leaves it."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    name = f"kptui_{gone.pid}"
    assert lifetime.lock_state(name) == lifetime.ABSENT
    offset = ElfSymbols(binary).function("add3").file_offset
    top.write("uprobe_events", f"p:{name}/add3 {binary}:0x{offset:x}\n")
    os.mkdir(tracefs_root / "instances" / name)
    try:
        assert kprobe_tui("cleanup", namespace=True).returncode == 0
        assert f"{name}/add3 " in top.read("uprobe_events") and (tracefs_root / "instances" / name).exists()
        cleaned = kprobe_tui("cleanup")
        assert f"removed instance {name}" in cleaned.stdout and f"removed {name}/add3" in cleaned.stdout
    finally:
        if (tracefs_root / "instances" / name).exists():
            os.rmdir(tracefs_root / "instances" / name)
        if f"{name}/add3 " in top.read("uprobe_events"):
            top.write("uprobe_events", f"-:{name}/add3\n")
