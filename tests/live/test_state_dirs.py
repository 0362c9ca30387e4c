"""What kprobe-tui keeps between runs no other local user can steer (kernel/lifetime.py, registry.py):
root's run locks and probe records are in a directory only root writes, a user's locks are in the
user's runtime directory, and a directory that is not trusted (another user's, a symlink) is named on
stderr and holds nothing. A real second user plants what it can; the directories are temporary ones
put in the place of /run/kprobe-tui and /run/user."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from kprobe_tui.kernel import lifetime, registry
from tests.conftest import system_user

pytestmark = pytest.mark.live  # root: it makes a user and chowns to it

USER = "kptuistate"
PROJECT = Path(__file__).parents[2]
DEFINITION = "p:kptuistate/mine /bin/true:0x10"
USERS_RUN = """
import sys, time
from pathlib import Path
from kprobe_tui.kernel import lifetime
lifetime.LOCK_DIR, lifetime.USERS_RUNTIME = Path(sys.argv[1]), Path(sys.argv[2])
print(lifetime.run_name(), flush=True)
time.sleep(120)
"""


@pytest.fixture(scope="module")
def user():
    with system_user(USER) as ids:
        yield ids


@pytest.fixture
def run(monkeypatch):
    """A /run of the test's own that every user may enter: LOCK_DIR and USERS_RUNTIME point into it."""
    directory = Path(tempfile.mkdtemp(prefix="kprobe-tui-run-"))
    os.chmod(directory, 0o755)
    (directory / "user").mkdir(mode=0o755)
    monkeypatch.setattr(lifetime, "LOCK_DIR", directory / "kprobe-tui")
    monkeypatch.setattr(lifetime, "USERS_RUNTIME", directory / "user")
    monkeypatch.setattr(lifetime, "_warned", set())
    yield directory
    shutil.rmtree(directory)


def as_the_user(user, *command: str, **options) -> subprocess.Popen:
    return subprocess.Popen(["setpriv", f"--reuid={user[0]}", f"--regid={user[1]}", "--clear-groups", *command],
                            cwd=PROJECT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **options)


def test_roots_directory_is_roots_alone_and_records_go_in_it(user, run):
    """A user could make made/ first in the 1777 directory, and root then recorded nothing, silently."""
    (run / "kprobe-tui").mkdir()
    os.chmod(run / "kprobe-tui", 0o1777)  # as an earlier kprobe-tui made it
    assert lifetime.lock_dir(create=True) == run / "kprobe-tui"
    assert stat.S_IMODE(os.lstat(run / "kprobe-tui").st_mode) == 0o755
    squat = as_the_user(user, "mkdir", str(run / "kprobe-tui" / "made"))
    assert squat.wait(timeout=30) != 0 and "Permission denied" in squat.stderr.read()
    registry.record("kptuistate", "mine", [DEFINITION])
    made = os.lstat(run / "kprobe-tui" / "made")
    assert (made.st_uid, stat.S_IMODE(made.st_mode)) == (0, 0o755)
    assert (run / "kprobe-tui" / "made" / "kptuistate:mine").is_file()


def test_a_records_directory_another_user_made_is_named_and_left_empty(user, run, capsys):
    (run / "kprobe-tui").mkdir(mode=0o755)
    (run / "kprobe-tui" / "made").mkdir(mode=0o755)
    os.chown(run / "kprobe-tui" / "made", *user)
    registry.record("kptuistate", "mine", [DEFINITION])
    assert os.listdir(run / "kprobe-tui" / "made") == []
    assert (f"kprobe-tui: not using {run}/kprobe-tui/made for records of the probes kprobe-tui makes: "
            f"it is owned by uid {user[0]}, not 0") in capsys.readouterr().err


def test_a_symlink_planted_for_roots_directory_is_not_followed(user, run, capsys):
    theirs = run / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, *user)
    (run / "kprobe-tui").symlink_to(theirs)
    os.lchown(run / "kprobe-tui", *user)
    registry.record("kptuistate", "mine", [DEFINITION])
    assert lifetime.lock_dir(create=True) is None
    assert os.listdir(theirs) == []
    assert (f"kprobe-tui: not using {run}/kprobe-tui for run locks and probe records: "
            "it is a symlink or not a directory") in capsys.readouterr().err


def test_a_users_run_locks_in_its_runtime_directory_and_root_judges_it_there(user, run):
    runtime = run / "user" / str(user[0])
    runtime.mkdir(mode=0o700)
    os.chown(runtime, *user)
    (run / "kprobe-tui").mkdir(mode=0o755)
    child = as_the_user(user, sys.executable, "-c", USERS_RUN, str(run / "kprobe-tui"), str(run / "user"),
                        env={**os.environ, "XDG_RUNTIME_DIR": str(runtime)})
    try:
        name = child.stdout.readline().strip()
        assert name == f"kptui_{child.pid}", child.stderr.read()
        lock = runtime / "kprobe-tui" / f"{name}.lock"
        assert os.lstat(lock).st_uid == user[0] and os.listdir(run / "kprobe-tui") == []
        assert lifetime.lock_state(name) == lifetime.HELD
        twin = lifetime._take_name(child.pid)  # root's run of the same PID in another PID namespace
        assert twin.name == f"{name}_1" and twin.lock == run / "kprobe-tui" / f"{name}_1.lock"
        os.close(twin.fd)
        os.unlink(twin.lock)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    assert lifetime.lock_state(name) == lifetime.FREE and lifetime.dead_runs() == [name]
    lifetime.forget(name)
    assert not lock.exists()


def test_a_runtime_directory_not_the_users_own_holds_no_lock(user, run):
    """As when ``sudo -u`` keeps root's XDG_RUNTIME_DIR: the user's run takes its name without a lock."""
    roots = run / "user" / "0"
    roots.mkdir(mode=0o700)
    child = as_the_user(user, sys.executable, "-c", USERS_RUN, str(run / "kprobe-tui"), str(run / "user"),
                        env={**os.environ, "XDG_RUNTIME_DIR": str(roots)})
    try:
        assert child.stdout.readline().strip() == f"kptui_{child.pid}"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    assert os.listdir(roots) == [] and not (run / "kprobe-tui").exists()
    assert (f"kprobe-tui: not using {roots} for this user's runtime directory: it cannot be opened "
            "(Permission denied)") in child.stderr.read()
