"""The index cache (debuginfo/index.py) is written only where no other user can steer it: root run with
a user's environment (``sudo -E`` keeps XDG_CACHE_HOME) makes nothing where that user points, a symlink
in the index file's place is not followed, and what it makes is 0700 and 0600. The index then lives in
memory: the lookups still answer. A real second user plants the directories and the symlink."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from kprobe_tui.debuginfo.index import NameIndex
from tests.conftest import system_user

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: it makes a user and acts as root for it")

USER = "kptuicache"
KEY = "0123abcd"


@pytest.fixture(scope="module")
def user():
    with system_user(USER) as ids:
        yield ids


@pytest.fixture
def place(monkeypatch):
    """A directory every user may enter, and a umask that would leave files readable by all."""
    directory = Path(tempfile.mkdtemp(prefix="kprobe-tui-cache-"))
    os.chmod(directory, 0o755)
    umask = os.umask(0o022)
    yield directory
    os.umask(umask)
    shutil.rmtree(directory)


def as_the_user(user, *command: str) -> None:
    subprocess.run(["setpriv", f"--reuid={user[0]}", f"--regid={user[1]}", "--clear-groups", *command], check=True)


def index() -> NameIndex:
    made = NameIndex.load_or_build(KEY, lambda: [("work", 11)], identity="built from here")
    assert made.cus("work") == [11]  # it answers, from memory or not
    return made


def files_under(directory: Path) -> list[str]:
    return sorted(str(path.relative_to(directory)) for path in directory.rglob("*"))


def test_root_with_a_users_cache_home_makes_nothing_where_the_user_points(user, place, monkeypatch):
    home = place / "home"
    home.mkdir(mode=0o755)
    os.chown(home, *user)
    aim = place / "roots"  # where the user would have root make a database
    aim.mkdir(mode=0o700)
    as_the_user(user, "mkdir", "-p", str(home / ".cache" / "kprobe-tui"))
    as_the_user(user, "ln", "-s", str(aim / "chosen.sqlite"), str(home / ".cache" / "kprobe-tui" / f"{KEY}.index.sqlite"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    index()
    assert os.listdir(aim) == []
    assert files_under(home) == [".cache", ".cache/kprobe-tui", f".cache/kprobe-tui/{KEY}.index.sqlite"]


def test_a_cache_directory_in_one_another_user_may_change_is_not_used(user, place, monkeypatch):
    """Root's own cache directory, but inside the user's: the user may rename it and put its own there."""
    home = place / "home"
    home.mkdir(mode=0o755)
    os.chown(home, *user)
    (home / "cache").mkdir(mode=0o700)
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "cache"))
    index()
    assert files_under(home) == ["cache"]


def test_a_symlink_in_the_index_files_place_is_not_followed(user, place, monkeypatch):
    cache = place / "cache" / "kprobe-tui"
    cache.mkdir(parents=True, mode=0o700)
    (cache / f"{KEY}.index.sqlite").symlink_to(place / "elsewhere.sqlite")
    monkeypatch.setenv("XDG_CACHE_HOME", str(place / "cache"))
    index()
    assert not (place / "elsewhere.sqlite").exists()


def test_the_cache_is_made_0700_and_its_files_0600(place, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(place / "cache"))
    index()
    modes = {name: stat.S_IMODE(os.lstat(place / name).st_mode)
             for name in ("cache", "cache/kprobe-tui", f"cache/kprobe-tui/{KEY}.index.sqlite")}
    assert modes == {"cache": 0o700, "cache/kprobe-tui": 0o700, f"cache/kprobe-tui/{KEY}.index.sqlite": 0o600}
    assert index().cus("work") == [11]  # and it is used again


def test_an_index_an_earlier_run_left_readable_by_all_is_made_private(place, monkeypatch):
    cache = place / "cache" / "kprobe-tui"
    cache.mkdir(parents=True, mode=0o755)
    (cache / f"{KEY}.index.sqlite").touch(mode=0o644)
    monkeypatch.setenv("XDG_CACHE_HOME", str(place / "cache"))
    index()
    assert stat.S_IMODE(os.lstat(cache).st_mode) == 0o700
    assert stat.S_IMODE(os.lstat(cache / f"{KEY}.index.sqlite").st_mode) == 0o600
