"""Live tail on real uprobes: values against what the program prints, filter push-down, cleanup."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from kprobe_tui.kernel import lifetime
from kprobe_tui.kernel.events import Events
from kprobe_tui.kernel.tracefs import Tracefs
from kprobe_tui.probes.symbols import ElfSymbols
from kprobe_tui.stream.session import TailSession

pytestmark = pytest.mark.live

SOURCE = Path(__file__).parent / "c" / "tail_values.c"
GROUP = f"kptailtest_{os.getpid()}"  # one per test run: two runs at once (CI and a developer) keep apart
PROBE = "n=%di:s64 s=+0(%si):string arr=+0(%dx):s32[4]"


TAIL_PIDS: list[int] = []  # kprobe-tui tail children: their instances are ours to check too


def kernel_state(root: Path) -> tuple[list[str], list[str], list[str]]:
    """Our part of the kernel's state (other engineers' tests may run at the same time)."""
    ours = {lifetime.run_name()} | {f"{lifetime.RUN_PREFIX}{pid}" for pid in TAIL_PIDS}
    return ([line for line in (root / "uprobe_events").read_text().splitlines() if f"{GROUP}/" in line],
            [line for line in (root / "dynamic_events").read_text().splitlines() if f"{GROUP}/" in line],
            sorted(name for name in os.listdir(root / "instances") if name in ours))


@pytest.fixture
def probed(tracefs_root, tmp_path):
    """The compiled program with ``GROUP/hit`` on hit(); removed afterwards, kernel as before."""
    before = kernel_state(tracefs_root)
    binary = tmp_path / "tail_values"
    subprocess.run(["gcc", "-O1", "-o", str(binary), str(SOURCE)], check=True)
    offset = ElfSymbols(binary).function("hit").file_offset
    top = Tracefs(tracefs_root)
    top.write("uprobe_events", f"p:{GROUP}/hit {binary}:0x{offset:x} {PROBE}\n")
    try:
        yield top, binary
    finally:
        if (tracefs_root / f"events/{GROUP}/hit").exists():
            top.write("uprobe_events", f"-:{GROUP}/hit\n")
        assert kernel_state(tracefs_root) == before


def expected(binary: Path, calls: int) -> list[dict]:
    """What the program printed, as the args the probe should have captured."""
    out = subprocess.run([str(binary), str(calls)], capture_output=True, text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        n, rest = line.split(" s=", 1)
        s, arr = rest.rsplit(" arr=", 1)
        rows.append({"n": int(n[2:]), "s": s, "arr": [int(v) for v in arr.split(",")]})
    return rows


def start_tail(tracefs_root: Path, *args: str, event: str = f"{GROUP}/hit") -> subprocess.Popen:
    """``kprobe-tui tail EVENT ARGS`` in a child; returns once its instance records ``event``."""
    child = subprocess.Popen([sys.executable, "-m", "kprobe_tui", "tail", event, *args],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    TAIL_PIDS.append(child.pid)
    enable = tracefs_root / f"instances/kptui_{child.pid}/events/{event}/enable"
    for _ in range(200):
        if enable.exists() and enable.read_text().strip() == "1":
            return child
        if child.poll() is not None:
            pytest.fail(f"tail exited early: {child.stderr.read()}")
        time.sleep(0.05)
    child.kill()
    pytest.fail("tail never enabled its event")


def test_json_events_carry_what_the_program_printed(probed, tracefs_root):
    top, binary = probed
    child = start_tail(tracefs_root, "--json", "--duration", "8")
    printed = expected(binary, 8)
    out, err = child.communicate(timeout=30)
    assert child.returncode == 0, err
    records = [json.loads(line) for line in out.splitlines()]
    assert [r["args"] for r in records] == printed
    assert {r["event"] for r in records} == {"hit"}
    # a single-threaded program: tgid is the pid (or unknown "-----" before the kernel saved it)
    assert {r["tgid"] for r in records} <= {None, records[0]["pid"]}, [r["tgid"] for r in records]
    # The kernel prints the comm it last saved for the pid (saved_cmdlines): right after the
    # exec the first events may still carry the forking python's name, and "<...>" when the pid
    # fell out of that cache (seen when the machine is busy). $comm captures it exactly.
    assert {r["comm"] for r in records} <= {"tail_values", "<...>", Path(sys.executable).name[:15], "python"}
    assert not (tracefs_root / f"instances/kptui_{child.pid}").exists()


def test_filter_is_pushed_to_the_kernel_and_applied(probed, tracefs_root):
    top, binary = probed
    child = start_tail(tracefs_root, "--filter", 'n >= 102 && s ~ "*a*"', "--duration", "8")
    kernel_filter = (tracefs_root / f"instances/kptui_{child.pid}/events/{GROUP}/hit/filter").read_text().strip()
    own_threads = sorted(int(tid) for tid in os.listdir(f"/proc/{child.pid}/task"))  # main and reader
    printed = [row for row in expected(binary, 8) if row["n"] >= 102 and "a" in row["s"]]
    out, err = child.communicate(timeout=30)
    # tail's own threads never record (its reads of trace_pipe would otherwise come back as events)
    assert len(own_threads) >= 2
    assert kernel_filter == " && ".join(f"common_pid != {tid}" for tid in own_threads) + ' && ((n >= 102 && s ~ "*a*"))'
    assert f"filter kernel: {GROUP}/hit" in err
    assert [line.split(" n=")[1].split(" ")[0] for line in out.splitlines()] == [str(r["n"]) for r in printed]
    assert len(printed) == 4  # 102 (delta), 104 (alpha), 105 (beta gamma), 106 (delta)


@pytest.mark.parametrize("signum, returncode", [(signal.SIGTERM, -signal.SIGTERM), (signal.SIGHUP, -signal.SIGHUP),
                                                 (signal.SIGINT, 130)])
def test_signals_remove_the_instance(probed, tracefs_root, signum, returncode):
    child = start_tail(tracefs_root)
    instance = tracefs_root / f"instances/kptui_{child.pid}"
    assert instance.exists()
    child.send_signal(signum)
    child.communicate(timeout=30)
    assert child.returncode == returncode and not instance.exists()


def test_flood_keeps_lost_monotonic_and_memory_bounded(probed):
    top, binary = probed
    calls = 200_000
    session = TailSession(top, [f"{GROUP}/hit"], max_events=20_000, buffer_kb=64)
    updates = []
    process = psutil.Process()
    session.start(updates.append)
    try:
        rss_before = process.memory_info().rss
        with session.store.lock:  # the reader stalls on the store: the 64 KB kernel buffer must overflow
            subprocess.run([str(binary), str(calls), "quiet"], check=True)
        deadline = time.monotonic() + 60
        while (not updates or session.store.total + updates[-1].lost < calls) and time.monotonic() < deadline:
            time.sleep(0.1)
        rss_after = process.memory_info().rss
    finally:
        session.stop()
    lost = [u.lost for u in updates]
    assert lost == sorted(lost) and lost[-1] > 0
    assert session.store.total + lost[-1] == calls  # every call was either read or counted lost
    assert len(session.store) == min(20_000, session.store.total)
    assert session.store.dropped == session.store.total - len(session.store)
    assert rss_after - rss_before < 60 * 2**20
    assert updates[-1].finished and not updates[-1].error
    assert len(updates) * 100 < session.store.total  # batched, not a message per event


def test_an_event_deleted_while_tailed_is_reported(probed, tracefs_root):
    top, binary = probed
    session = TailSession(top, [f"{GROUP}/hit"])
    updates = []
    session.start(updates.append)
    try:
        session.instance.tracefs.write(f"events/{GROUP}/hit/enable", "0", append=False)
        top.write("uprobe_events", f"-:{GROUP}/hit\n")  # someone else deletes it
        deadline = time.monotonic() + 10
        while not any(u.vanished for u in updates) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        session.stop()
    assert [name for u in updates for name in u.vanished] == [f"{GROUP}/hit"]
    assert not session.instance.tracefs.root.exists()


def test_sigkill_leaves_a_stale_instance_that_cleanup_removes(probed, tracefs_root):
    top, _ = probed
    child = start_tail(tracefs_root)
    child.kill()
    child.communicate(timeout=30)
    name = f"kptui_{child.pid}"
    assert (tracefs_root / "instances" / name).exists() and lifetime.is_stale(name)
    removed, _ = Events(top).cleanup()
    assert name in removed and not (tracefs_root / "instances" / name).exists()
