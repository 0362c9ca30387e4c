"""Lab mode as a real non-root user: created here, the app run as that user in a forked child.

The child drops to the user with setgid/setuid. Two cases: a plain user (tracefs is closed to
it), and a user an administrator let read tracefs, modelled by keeping CAP_DAC_READ_SEARCH
(read and search everything, write nothing). The parent checks that nothing was written.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import shutil
import subprocess
import traceback
from pathlib import Path

import pytest

from kprobe_tui.kernel import access
from kprobe_tui.kernel.sources import KernelSources, locate
from kprobe_tui.kernel.tracefs import Tracefs
from kprobe_tui.probes.binary import BinaryCatalog
from kprobe_tui.probes.symbols import ElfSymbols
from tests.conftest import system_user

pytestmark = pytest.mark.live

USER = "kptuilab"
C_PROGRAM = Path(__file__).parent / "c" / "basic.c"
ADMIN_GROUP = "kptuilabadmin"
CAP_DAC_READ_SEARCH = 2


@pytest.fixture(scope="module")
def lab_user():
    """A throw-away system user (removed afterwards); (uid, gid)."""
    with system_user(USER) as ids:
        yield ids


@pytest.fixture(scope="module")
def shared_dir(lab_user):
    """A directory the lab user can read: the program and the child's HOME."""
    directory = Path("/tmp/kprobe-tui-lab-test")
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(mode=0o755)
    os.chmod(directory, 0o755)
    subprocess.run(["gcc", "-O1", "-g", "-o", str(directory / "prog"), str(C_PROGRAM)], check=True)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def as_user(user: tuple[int, int], work, read_everything: bool = False, home: Path | None = None):
    """``work()`` in a forked child running as ``user``; its JSON-able result, or its traceback re-raised."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            os.setgroups([])
            if read_everything:
                libc.prctl(8, 1, 0, 0, 0)  # PR_SET_KEEPCAPS: keep the permitted set across setuid
            os.setgid(user[1])
            os.setuid(user[0])
            if read_everything:
                _keep_only(libc, CAP_DAC_READ_SEARCH)
            if home is not None:
                os.environ["HOME"] = str(home)
            result = {"ok": work()}
        except BaseException:  # noqa: BLE001  (whatever it is, the parent must hear of it)
            result = {"error": traceback.format_exc()}
        os.write(write, json.dumps(result).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        answer = json.loads(pipe.read() or '{"error": "the child wrote nothing"}')
    os.waitpid(pid, 0)
    if "error" in answer:
        pytest.fail(f"in the child:\n{answer['error']}")
    return answer["ok"]


def _keep_only(libc, capability: int) -> None:
    """capset(2): effective and permitted = just ``capability``."""

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    data = (Data * 2)()
    data[0].effective = data[0].permitted = 1 << capability
    if libc.capset(ctypes.byref(Header(0x20080522, 0)), data) != 0:  # _LINUX_CAPABILITY_VERSION_3
        raise OSError(ctypes.get_errno(), "capset failed")


def kernel_state(root: Path, binary: Path) -> tuple[list[str], list[str]]:
    """The probes on our program (other engineers' tests change the rest meanwhile)."""
    return ([line for line in (root / "uprobe_events").read_text().splitlines() if str(binary) in line],
            [line for line in (root / "dynamic_events").read_text().splitlines() if str(binary) in line])


# --- access.decide, one test per reason ---------------------------------------------------------

def why_not(decided: access.Access) -> dict[str, str]:
    """Each ability's reason ("" where allowed): JSON, to come back from a child running as another user."""
    return {name: ability.why_not for name, ability in vars(decided).items() if isinstance(ability, access.Ability)}


def test_a_snapshot_is_lab_mode():
    sources = KernelSources(Path("/nonexistent"), None, Path("/proc/kallsyms"), Path("/sys/kernel/btf"),
                            live=False, release="6.1.0-test")
    decided = access.decide(sources)
    assert decided.can_create.why_not == "read-only snapshot of kernel 6.1.0-test" and not decided.can_aggregate
    assert decided.banner() == ("LAB MODE: read-only — read-only snapshot of kernel 6.1.0-test. "
                                "Build a probe and copy the command for an administrator.")
    assert decided.can_tail.why_not == "a snapshot cannot be tailed"


def test_root_on_this_machine_has_full_mode():
    decided = access.decide(locate(mount=False))
    assert all((decided.can_create, decided.can_list, decided.can_tail, decided.can_aggregate))
    assert decided.can_create.why_not == decided.can_tail.why_not == ""


def test_unmounted_tracefs_for_a_user(lab_user):
    sources = KernelSources(None, None, Path("/proc/kallsyms"), Path("/sys/kernel/btf"))
    reason = as_user(lab_user, lambda: access.decide(sources).can_create.why_not)
    assert reason == "tracefs is not mounted and only root can mount it"


def test_a_kernel_without_probe_files(tmp_path):
    sources = KernelSources(tmp_path, None, Path("/proc/kallsyms"), Path("/sys/kernel/btf"))
    decided = access.decide(sources)
    assert not decided.can_create and "no kprobe_events or uprobe_events" in decided.can_create.why_not


def test_the_reason_names_the_file_that_stops_the_user(lab_user, shared_dir):
    """A tracefs-like tree: root-owned 0640 uprobe_events, an instances/ the user may write."""
    fake = shared_dir / "tracing"
    (fake / "instances").mkdir(parents=True)
    os.chmod(fake, 0o755)
    (fake / "uprobe_events").write_text("")
    os.chmod(fake / "uprobe_events", 0o640)
    os.chown(fake / "instances", lab_user[0], lab_user[1])
    sources = KernelSources(fake, None, Path("/proc/kallsyms"), Path("/sys/kernel/btf"))
    try:
        decided = as_user(lab_user, lambda: why_not(access.decide(sources)))
        why = f"you are uid {lab_user[0]} and {fake}/uprobe_events is root-owned (group root) mode 0640"
        assert decided["can_create"] == decided["can_list"] == why
        assert decided["can_tail"] == "" and decided["can_aggregate"]  # a student may tail an administrator's probes
        os.chmod(fake, 0o700)  # now the directory itself stops it
        decided = as_user(lab_user, lambda: why_not(access.decide(sources)))
        assert decided["can_create"] == f"you are uid {lab_user[0]} and {fake} is root-owned (group root) mode 0700"
        assert decided["can_tail"]
    finally:
        shutil.rmtree(fake)


def test_the_real_tracefs_closed_to_a_plain_user(lab_user, tracefs_root):
    decided = as_user(lab_user, lambda: why_not(access.decide(locate(mount=False))))
    mode = tracefs_root.stat().st_mode & 0o7777
    why = f"you are uid {lab_user[0]} and {tracefs_root} is root-owned (group root) mode {mode:04o}"
    assert decided["can_create"] == decided["can_list"] == decided["can_tail"] == why


# --- the app, as a user who may read tracefs but write nothing ------------------------------------

@pytest.fixture
def admin_probe(shared_dir, tracefs_root):
    """A uprobe root made, as an administrator would: the lab user sees it, read-only."""
    prog = shared_dir / "prog"
    top = Tracefs(tracefs_root)
    offset = ElfSymbols(prog).function("add3").file_offset
    top.write("uprobe_events", f"p:{ADMIN_GROUP}/add3 {prog}:0x{offset:x} a=%di:s64\n")
    try:
        yield prog
    finally:
        top.write("uprobe_events", f"-:{ADMIN_GROUP}/add3\n")


def test_the_app_in_lab_mode_reads_everything_and_writes_nothing(lab_user, shared_dir, admin_probe, tracefs_root):
    prog = admin_probe
    before = kernel_state(tracefs_root, prog)

    def drive() -> dict:
        from textual.widgets import Button

        from kprobe_tui.tui.app import KprobeTui
        from kprobe_tui.tui.screens.builder import ProbeBuilderScreen
        from kprobe_tui.tui.screens.events import EventsScreen
        from kprobe_tui.tui.screens.probes import ProbesScreen
        from kprobe_tui.tui.widgets.function_list import FunctionList

        seen: dict = {"pid": os.getpid()}

        async def main() -> None:
            app = KprobeTui(locate(mount=False), BinaryCatalog(prog))
            async with app.run_test(size=(100, 30)) as pilot:
                seen["sub_title"] = app.sub_title
                seen["notes"] = [n.message for n in app._notifications]
                await pilot.press("l")
                panel = app.screen
                assert isinstance(panel, ProbesScreen)
                name = f"{ADMIN_GROUP}/add3"
                for _ in range(200):
                    if name in panel.shown:
                        break
                    await pilot.pause(0.05)
                seen["listed"] = name in panel.shown
                table = panel.query_one("DataTable")
                table.move_cursor(row=table.get_row_index(name))
                await pilot.pause()
                seen["detail"] = str(panel.query_one("#detail").render())
                messages = []
                for key in ("d", "d", "b", "space", "t"):
                    await pilot.press(key)
                    messages.append(str(panel.query_one("#message").render()))
                seen["messages"] = messages
                seen["still_panel"] = app.screen is panel
                await pilot.press("e")  # the events screen, on every probe
                events = app.screen
                assert isinstance(events, EventsScreen)
                seen["events_status"] = str(events.query_one("#status").render())
                await pilot.press("escape")
                await pilot.press("escape")
                functions = app.screen.query_one(FunctionList)
                for _ in range(200):
                    if functions.rows:
                        break
                    await pilot.pause(0.05)
                await pilot.press("slash", *"add3", "escape", "p")
                builder = app.screen
                assert isinstance(builder, ProbeBuilderScreen)
                seen["buttons"] = [str(b.label) for b in builder.query(Button)]

        asyncio.run(main())
        return seen

    seen = as_user(lab_user, drive, read_everything=True, home=shared_dir)
    reason = f"you are uid {lab_user[0]} and {tracefs_root}/dynamic_events is root-owned (group root) mode 0640"
    assert seen["sub_title"] == f"LAB MODE: read-only — {reason}"
    assert (f"LAB MODE: read-only — {reason}. Build a probe and copy the command for an administrator."
            in seen["notes"])
    assert seen["listed"] and "uprobe of someone else" in seen["detail"]
    refused = f"lab mode: {reason}. An administrator can run: sudo kprobe-tui del {ADMIN_GROUP}/add3"
    assert seen["messages"][:2] == [refused, refused]  # in lab mode insisting does not help
    assert seen["messages"][2].startswith(f"lab mode: {reason}. An administrator can run: sudo kprobe-tui del")
    not_permitted = f"you are uid {lab_user[0]} and {tracefs_root}/instances is root-owned (group root) mode 0750"
    assert seen["messages"][3] == f"lab mode: recording is not permitted ({not_permitted})"
    assert seen["messages"][4] == f"tailing is not permitted: {not_permitted}"
    assert seen["still_panel"]
    assert f"tailing is not permitted: no trace instance ({not_permitted})" in seen["events_status"]
    assert "Copy for admin" in seen["buttons"] and "Create" not in seen["buttons"]  # the hand-off
    assert kernel_state(tracefs_root, prog) == before  # nothing written: no probe, no instance
    assert f"kptui_{seen['pid']}" not in os.listdir(tracefs_root / "instances")
