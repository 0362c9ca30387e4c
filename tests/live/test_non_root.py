"""A user who is not root, on this machine's real tracefs (``drwx------ root``): every command and
the TUI's ``l``, ``e`` and ``p`` end in a message naming what stops the user, never a traceback;
a dry run and the builder need no tracefs at all (issue 15, item 15).

A throw-away system user runs the CLI (setpriv) and the app (a forked child, as test_lab_mode does).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_lab_mode import as_user

from kprobe_tui.kernel import lifetime
from kprobe_tui.kernel.sources import locate
from kprobe_tui.probes.binary import BinaryCatalog
from tests.conftest import system_user

pytestmark = pytest.mark.live

USER = "kptuinoroot"  # not test_lab_mode's: both may run at once
C_PROGRAM = Path(__file__).parents[1] / "tui" / "c" / "builder_prog.c"
PROJECT = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def user():
    with system_user(USER) as ids:
        yield ids


@pytest.fixture(scope="module")
def home(user):
    """The user's HOME, and the program it probes (readable by it)."""
    directory = Path("/tmp/kprobe-tui-non-root-test")
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(mode=0o755)
    os.chmod(directory, 0o755)
    subprocess.run(["gcc", "-O0", "-g", "-o", str(directory / "prog"), str(C_PROGRAM)], check=True)
    os.chown(directory, *user)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def closed(tracefs_root, user) -> str:
    """What stops the user, in the words every message must carry."""
    mode = tracefs_root.stat().st_mode & 0o7777
    if mode & 0o005:
        pytest.skip(f"{tracefs_root} is mode {mode:04o} here: others may enter it")
    return f"you are uid {user[0]} and {tracefs_root} is root-owned (group root) mode {mode:04o}"


def as_the_user(user, home: Path, *args: str) -> subprocess.CompletedProcess:
    command = ["setpriv", f"--reuid={user[0]}", f"--regid={user[1]}", "--clear-groups",
               sys.executable, "-m", "kprobe_tui", *args]
    return subprocess.run(command, cwd=PROJECT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")})


@pytest.mark.parametrize("args", [["list"], ["del", "work"], ["del", "kprobe_tui/*"], ["cleanup"], ["cleanup", "-n"],
                                  ["tail", "--duration", "1"], ["snapshot", "{home}/out.tar.gz"],
                                  ["probe", "-x", "{home}/prog", "work"]])
def test_every_command_says_what_stops_the_user(user, home, closed, args):
    done = as_the_user(user, home, *(arg.format(home=home) for arg in args))
    assert done.returncode == (254 if args[0] == "probe" else 2), done.stdout  # probe: perf probe's -ENOENT
    assert closed in done.stderr and "Traceback" not in done.stderr and "internal error" not in done.stderr
    assert not (home / "out.tar.gz").exists()


def test_a_dry_run_needs_no_tracefs(user, home, closed):
    done = as_the_user(user, home, "probe", "-n", "--explain", "-g", "kprobe_tui", "--event-filter", "n > 1",
                       "-x", str(home / "prog"), "work", "n")
    assert done.returncode == 0, done.stderr
    assert "  kprobe_tui:work " in done.stderr  # perf's "Added new event" text
    assert f"echo 'p:kprobe_tui/work {home}/prog:0x" in done.stdout and "echo 'n > 1' >" in done.stdout


def test_the_tuis_l_e_and_p_say_what_stops_the_user_and_the_builder_compiles(user, home, closed):
    prog = home / "prog"

    def drive() -> dict:
        from kprobe_tui.tui.app import KprobeTui
        from kprobe_tui.tui.screens.builder import ProbeBuilderScreen
        from kprobe_tui.tui.screens.events import EventsScreen
        from kprobe_tui.tui.screens.probes import ProbesScreen
        from kprobe_tui.tui.widgets.function_list import FunctionList

        seen: dict = {}

        async def main() -> None:
            app = KprobeTui(locate(mount=False), BinaryCatalog(prog))
            async with app.run_test(size=(100, 30)) as pilot:
                await pilot.press("l")
                panel = app.screen
                seen["panel"] = isinstance(panel, ProbesScreen)
                for _ in range(200):
                    if str(panel.query_one("#message").render()):
                        break
                    await pilot.pause(0.05)
                seen["panel_message"] = str(panel.query_one("#message").render())
                await pilot.press("escape", "e")
                seen["events"] = isinstance(app.screen, EventsScreen)
                seen["events_status"] = str(app.screen.query_one("#status").render())
                await pilot.press("escape")
                functions = app.screen.query_one(FunctionList)
                for _ in range(200):
                    if functions.rows:
                        break
                    await pilot.pause(0.05)
                await pilot.press("slash", *"work", "escape", "p")
                builder = app.screen
                seen["builder"] = isinstance(builder, ProbeBuilderScreen)
                await pilot.pause()
                await app.workers.wait_for_complete()
                await pilot.pause()
                preview = builder.preview
                seen["preview_error"] = preview.error.message if preview.error else None
                seen["definition"] = preview.probes[0].definition() if preview.probes else None
                seen["exit"] = app.return_code
            seen["name"] = lifetime.own_name()  # the child ends with os._exit: its lock file is the parent's to remove

        asyncio.run(main())
        return seen

    seen = as_user(user, drive, home=home)
    if seen["name"]:
        lifetime.forget(seen["name"])
    assert seen["panel"] and closed in seen["panel_message"]
    assert seen["events"] and closed in seen["events_status"]
    assert seen["builder"] and seen["preview_error"] is None, seen["preview_error"]
    assert seen["definition"].startswith(f"p:kprobe_tui/work {prog}:0x")
    assert seen["exit"] is None  # still running: nothing crashed it
