"""The student's tail without root (issue 23): a uid with no instance and no capability of its own but
read access to tracefs (CAP_DAC_READ_SEARCH, as test_lab_mode models an administrator's chgrp), under
each set-up of perf-security.rst: ``kernel.perf_event_paranoid = -1`` (our own perf_event_open), or a
perf binary with capabilities (its ``perf record`` is the reader). Its ``kprobe-tui tail`` (text and
JSON) is compared event for event with its own ``perf record -e GROUP:hit -a`` + ``perf script`` on
the same calls; under the default paranoid level without such a perf it is told the set-ups and their
commands.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_lab_mode import as_user

from kprobe_tui.kernel.perfevent import PARANOID, paranoid
from tests.conftest import system_user

pytestmark = pytest.mark.live

SOURCE = Path(__file__).parent / "c" / "tail_values.c"
PROJECT = Path(__file__).parents[2]
GROUP = f"kpstudent_{os.getpid()}"
PERF = "/usr/bin/perf"
CALLS = 7
# perf script's line for the probe: "tvg  9926 [001] 10850.389091: GROUP:hit: (562af78ef159) n=100 s_string="alpha""
PERF_LINE = re.compile(r"\s*(?P<comm>.+?)\s+(?P<tid>\d+)\s+\[(?P<cpu>\d+)\]\s+(?P<time>\d+\.\d+):\s+\S+:hit:\s+"
                       r"\((?P<site>[0-9a-f]+)\)\s+n=(?P<n>-?\d+)\s+s_string=\"(?P<s>.*)\"$")


@pytest.fixture(scope="module")
def student():
    with system_user("kpstudent") as ids:
        yield ids


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """The administrator's probes GROUP:hit and GROUP:hit__return, made with ``kprobe-tui probe`` on a program
    built here; deleted after."""
    directory = tmp_path_factory.mktemp("student")
    os.chmod(directory, 0o777)
    binary = directory / "tvg"
    subprocess.run(["gcc", "-O0", "-g", "-o", str(binary), str(SOURCE)], check=True)
    os.chmod(binary, 0o755)
    made = subprocess.run([sys.executable, "-m", "kprobe_tui", "probe", "-x", str(binary), "-g", GROUP, "hit", "n", "s:string"],
                          cwd=PROJECT, capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    made = subprocess.run([sys.executable, "-m", "kprobe_tui", "probe", "-x", str(binary), "-g", GROUP, "hit%return", "$retval"],
                          cwd=PROJECT, capture_output=True, text=True)
    try:
        assert made.returncode == 0, made.stderr
        yield directory, binary
    finally:
        subprocess.run([sys.executable, "-m", "kprobe_tui", "probe", "-d", f"{GROUP}:*"], cwd=PROJECT, capture_output=True)
        assert not Path(f"/sys/kernel/tracing/events/{GROUP}").exists()


async def wait_for(pilot, condition) -> bool:
    """Let the app run until ``condition()`` holds (at most 20 s); whether it did."""
    for _ in range(400):
        if condition():
            return True
        await pilot.pause(0.05)
    return False


async def on_probe(pilot, app, name: str, key: str):
    """The probes panel (l), the cursor on ``name`` once it is listed, then ``key``: the screen that opens."""
    await pilot.press("l")
    panel = app.screen
    await wait_for(pilot, lambda: name in panel.shown)
    table = panel.query_one("DataTable")
    table.move_cursor(row=table.get_row_index(name))
    await pilot.press(key)
    return app.screen


def ours(tracefs_root: Path) -> list[str]:
    """The lab's probes (other engineers' tests make and delete theirs meanwhile)."""
    return [line for line in (tracefs_root / "dynamic_events").read_text().splitlines() if f"{GROUP}/" in line]


def set_paranoid(level: int) -> None:
    Path(PARANOID).write_text(f"{level}\n")


@pytest.fixture
def paranoid_minus_one():
    """Set-up 1 for the test's length; the level before restored also on failure."""
    before = paranoid()
    assert before is not None
    set_paranoid(-1)
    try:
        yield
    finally:
        set_paranoid(before)


def as_student(student, directory: Path, *command: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """``command`` as the student: its uid and group, no other group, CAP_DAC_READ_SEARCH only (ambient)."""
    return subprocess.Popen(["setpriv", f"--reuid={student[0]}", f"--regid={student[1]}", "--clear-groups",
                             "--inh-caps=-all,+dac_read_search", "--ambient-caps=+dac_read_search", *command],
                            cwd=directory, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "HOME": str(directory), "PYTHONPATH": str(PROJECT), **(env or {})})


def tail_as_student(student, directory: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    child = as_student(student, directory, sys.executable, "-m", "kprobe_tui", "tail", f"{GROUP}:hit", *args, env=env)
    announced = b""  # once the events are open; read from the pipe itself: communicate() reads past any buffer
    while not announced.endswith(b"\n") and (byte := os.read(child.stderr.fileno(), 1)):
        announced += byte
    announced = announced.decode()
    assert "no trace instance here: the events are sampled" in announced, announced + child.stderr.read()
    return child


def perf_script_events(student, directory: Path, perf: str) -> list[tuple]:
    """(time to the us, tid, cpu, n, s) of each sample perf recorded, as perf script prints them.

    The times are the same clock's (perf_clock) but not equal: the kernel stamps each perf event's sample
    as it writes it, so three readers of one call see times a few microseconds apart (5 us here)."""
    script = as_student(student, directory, perf, "script", "-i", str(directory / "perf.data"))
    out, err = script.communicate(timeout=60)
    assert script.returncode == 0, err
    rows = [PERF_LINE.fullmatch(line) for line in out.splitlines()]
    assert all(rows), out
    return [(row["time"], int(row["tid"]), int(row["cpu"]), int(row["n"]), row["s"]) for row in rows if row]


@pytest.fixture(scope="module")
def capable_perf() -> Iterator[str]:
    """Set-up 2: a copy of perf with perf-security.rst's capabilities, and cap_dac_read_search standing in for
    the tracefs group permissions an administrator gives (a student's own ambient capability is dropped when
    it runs a file that has capabilities)."""
    directory = Path(f"/tmp/kprobe-tui-perfusers-{os.getpid()}")  # every parent searchable: found on PATH
    directory.mkdir(mode=0o755)
    try:
        perf = directory / "perf"
        shutil.copy2(PERF, perf)
        subprocess.run(["setcap", "cap_perfmon,cap_sys_ptrace,cap_syslog,cap_dac_read_search=ep", str(perf)], check=True)
        yield str(perf)
    finally:
        shutil.rmtree(directory)


@pytest.fixture(params=["paranoid -1", "capable perf"])
def set_up(request, capable_perf):
    """One of the administrator's set-ups, for the test's length: (the perf the student runs, the environment)."""
    if request.param == "capable perf":
        yield capable_perf, {"KPROBE_TUI_PERF": capable_perf}
        return
    request.getfixturevalue("paranoid_minus_one")
    yield PERF, {}


def test_the_students_tail_is_perf_records_event_for_event(student, lab, set_up):
    directory, binary = lab
    perf, env = set_up
    text = tail_as_student(student, directory, "--duration", "15", env=env)
    as_json = tail_as_student(student, directory, "--json", "--duration", "15", "--filter", "n >= 102 && comm == \"tvg\"",
                              env=env)
    # perf runs the program once its events are enabled (its start takes seconds on a busy machine)
    recording = as_student(student, directory, perf, "record", "-q", "-e", f"{GROUP}:hit", "-a", "-o",
                           str(directory / "perf.data"), "--", str(binary), str(CALLS))
    printed, err = recording.communicate(timeout=120)
    assert recording.returncode == 0, err
    oracle = perf_script_events(student, directory, perf)
    text_out, text_err = text.communicate(timeout=60)
    json_out, json_err = as_json.communicate(timeout=60)
    assert text.returncode == 0 and as_json.returncode == 0, text_err + json_err
    assert len(oracle) == CALLS and [row[3] for row in oracle] == list(range(100, 100 + CALLS))
    assert [row[4] for row in oracle] == [line.split(" s=")[1].split(" arr=")[0] for line in printed.splitlines()]

    # "10850.389091 [001] tvg-9926 hit: (0x562af78ef159) n=100 s_string="alpha""
    lines = text_out.splitlines()
    tail_rows = []
    for line in lines:
        stamp, cpu, task, rest = line.split(" ", 3)
        tid = int(task.rsplit("-", 1)[1])
        n, s = re.fullmatch(r'hit: \(0x[0-9a-f]+\) n=(-?\d+) s_string="(.*)"', rest).groups()
        tail_rows.append((stamp, tid, int(cpu.strip("[]")), int(n), s))
        assert task.rsplit("-", 1)[0] == "tvg"
    assert [row[1:] for row in tail_rows] == [row[1:] for row in oracle]
    assert all(abs(float(ours[0]) - float(perfs[0])) < 0.001 for ours, perfs in zip(tail_rows, oracle, strict=True))
    assert "lost" not in text_err

    records = [json.loads(line) for line in json_out.splitlines()]
    assert [(r["pid"], r["cpu"], r["args"]["n"], r["args"]["s_string"]) for r in records] == [row[1:] for row in oracle[2:]]
    assert {r["comm"] for r in records} == {"tvg"} and {r["tgid"] for r in records} == {oracle[0][1]}
    assert "filter kernel:" in json_err  # n >= 102 went to the perf events; comm stays in the view


def test_doctor_says_which_reader_the_student_gets_and_why(student, lab, paranoid_minus_one):
    directory, _ = lab
    out, err = as_student(student, directory, sys.executable, "-m", "kprobe_tui", "doctor").communicate(timeout=120)
    section = out.split("Events reader\n", 1)[1].split("\n\n", 1)[0]
    assert section.startswith("  [ok] perf_event_open (student reader)"), out + err
    assert "instances is root-owned" in section and "kernel.perf_event_paranoid is -1" in section


def test_doctor_finds_a_capable_perf_on_path_under_the_default_paranoid_level(student, lab, capable_perf):
    directory, _ = lab
    path = f"{Path(capable_perf).parent}:{os.environ['PATH']}"
    out, err = as_student(student, directory, sys.executable, "-m", "kprobe_tui", "doctor", env={"PATH": path}).communicate(timeout=120)
    section = out.split("Events reader\n", 1)[1].split("\n\n", 1)[0]
    assert section.startswith(f"  [ok] {capable_perf} record (student reader)"), out + err
    assert f"but {capable_perf} may: events are read from its perf record -a" in section


def test_under_the_default_paranoid_level_the_student_is_told_the_set_ups(student, lab):
    level = paranoid()
    if level is None or level < 1:
        pytest.skip(f"kernel.perf_event_paranoid is {level} here")
    directory, _ = lab
    done = as_student(student, directory, sys.executable, "-m", "kprobe_tui", "tail", f"{GROUP}:hit", "--duration", "1")
    out, err = done.communicate(timeout=60)
    assert done.returncode == 2 and not out
    assert f"kernel.perf_event_paranoid is {level}" in err and "needs -1 or CAP_PERFMON" in err, err
    assert "sudo sysctl kernel.perf_event_paranoid=-1" in err and "sudo setcap cap_perfmon,cap_sys_ptrace,cap_syslog=ep /usr/bin/perf" in err
    assert "Traceback" not in err
    out, _ = as_student(student, directory, sys.executable, "-m", "kprobe_tui", "doctor").communicate(timeout=120)
    assert "  [--] none " in out and "to tail here, ask the administrator for one of: (1) sudo sysctl" in out


def test_the_events_screen_in_lab_mode_follows_through_the_student_reader(student, lab, paranoid_minus_one, tracefs_root):
    """The app as the student (lab mode: no probe of its own): l, the administrator's probe, t: the events
    screen shows each call, filters it (in the kernel), pauses; nothing is written to tracefs."""
    directory, binary = lab
    filter_before = (tracefs_root / f"events/{GROUP}/hit/filter").read_text()

    def drive() -> dict:
        import asyncio

        from kprobe_tui.kernel.sources import locate
        from kprobe_tui.probes.binary import BinaryCatalog
        from kprobe_tui.tui.app import KprobeTui
        from kprobe_tui.tui.screens.events import EventsScreen

        seen: dict = {"pid": os.getpid()}

        async def main() -> None:
            app = KprobeTui(locate(mount=False), BinaryCatalog(binary))
            async with app.run_test(size=(120, 30)) as pilot:
                seen["sub_title"] = app.sub_title
                events = await on_probe(pilot, app, f"{GROUP}/hit", "t")
                seen["events"] = isinstance(events, EventsScreen)
                await wait_for(pilot, lambda: events.session is not None)
                subprocess.run([str(binary), str(CALLS)], capture_output=True, check=True)
                seen["followed"] = await wait_for(pilot, lambda: len(events.store) == CALLS)
                seen["status"] = str(events.query_one("#status").render())
                await pilot.press("slash", *"n > 103", "enter")
                await wait_for(pilot, lambda: events.session.plan.text == "n > 103")
                seen["plan"] = events.session.plan.summary()
                subprocess.run([str(binary), str(CALLS)], capture_output=True, check=True)
                seen["filtered"] = await wait_for(pilot, lambda: len(events.store) == CALLS + 3)
                await pilot.press("p")
                await wait_for(pilot, lambda: events.session.paused)
                subprocess.run([str(binary), str(CALLS)], capture_output=True, check=True)
                await pilot.pause(0.5)
                seen["paused_count"] = len(events.store)
                seen["paused_status"] = str(events.query_one("#status").render())

        asyncio.run(main())
        return seen

    seen = as_user(student, drive, read_everything=True, home=directory)
    assert "LAB MODE" in seen["sub_title"] and "reading through perf_event_open (student reader)" in seen["sub_title"]
    assert seen["events"] and seen["followed"], seen
    assert "perf_event_open" in seen["status"] and f"{CALLS:,} shown" in seen["status"] and "lost 0" in seen["status"]
    assert seen["plan"] == f"kernel: {GROUP}/hit"  # n > 103 went to the perf event
    assert seen["filtered"] and seen["paused_count"] == CALLS + 3 and "PAUSED" in seen["paused_status"]
    assert not [name for name in os.listdir(tracefs_root / "instances") if name.startswith(f"kptui_{seen['pid']}")]
    assert (tracefs_root / f"events/{GROUP}/hit/filter").read_text() == filter_before


def test_a_ring_size_that_is_not_a_power_of_two_is_a_clean_refusal(student, lab, paranoid_minus_one):
    directory, _ = lab
    done = as_student(student, directory, sys.executable, "-m", "kprobe_tui", "tail", f"{GROUP}:hit", "--duration", "1",
                      env={"KPROBE_TUI_PERF_PAGES": "100"})
    _, err = done.communicate(timeout=60)
    assert done.returncode == 2 and "KPROBE_TUI_PERF_PAGES='100': must be a power of two from 1 to 16384" in err, err
    assert "Traceback" not in err


def test_the_student_counts_and_histograms_the_administrators_event(student, lab, set_up, tracefs_root):
    """count by comm, a histogram of n with a filter on n the perf events apply, and the latency from the
    entry probe to the return probe, over the administrator's probes (made by no one in this run): each
    equal to the calls the program made."""
    directory, binary = lab
    _, env = set_up
    definitions_before = ours(tracefs_root)

    def aggregate() -> dict:
        os.environ.update(env)
        from kprobe_tui.aggregate.model import Aggregation, Field
        from kprobe_tui.aggregate.run import AggregationRun
        from kprobe_tui.aggregate.user_engine import existing_targets
        from kprobe_tui.kernel.sources import locate

        top = locate(mount=False).tracing()
        answers = {}
        for name, model, filter_text in (("count", Aggregation("count", keys=(Field("comm"),)), ""),
                                          ("hist", Aggregation("hist", value=Field("n")), "n >= 103"),
                                          ("latency", Aggregation("latency", keys=(Field("comm"),), unit="ns"), "")):
            events = [f"{GROUP}:hit", f"{GROUP}:hit__return"] if name == "latency" else [f"{GROUP}:hit"]
            targets = existing_targets(top, events, latency=name == "latency")
            run = AggregationRun(top, model, targets, filter_text, existing=True)
            choice = run.start()
            try:
                subprocess.run([str(binary), str(CALLS)], capture_output=True, check=True)
                final = run.stop()
            finally:
                run.stop()
            assert final is not None
            answers[name] = {"engine": f"{choice.engine}/{choice.method}", "reason": choice.reason,
                             "entries": [[list(e.key), e.count] for e in final.total.entries],
                             "count": final.total.count, "sum": final.total.total.sum, "lost": final.total.lost,
                             "kernel_filters": run.engine.kernel_filters if run.engine else None}
        return answers

    answers = as_user(student, aggregate, read_everything=True, home=directory)
    assert answers["count"]["engine"] == "user/perf"
    assert ("record -a" if env else "sample tracepoints system-wide") in answers["count"]["reason"]
    assert answers["count"]["entries"] == [[["tvg"], CALLS]] and answers["count"]["lost"] == 0
    kept = [n for n in range(100, 100 + CALLS) if n >= 103]
    assert answers["hist"]["count"] == len(kept) and answers["hist"]["sum"] == sum(kept)
    assert answers["hist"]["kernel_filters"] == {"hit": "n >= 103"}  # in the perf event, not here
    # each call timed from its entry to its return, on the perf clock (a few microseconds under a uprobe each)
    assert answers["latency"]["entries"] == [[["tvg"], CALLS]] and 0 < answers["latency"]["sum"] < CALLS * 10**7
    assert ours(tracefs_root) == definitions_before  # nothing made, nothing deleted


def test_the_students_count_command_counts_the_administrators_event_by_name(student, lab, set_up, tracefs_root):
    """``kprobe-tui count GROUP:hit --by comm``, as perf record names an event: the administrator's probe is counted,
    not made anew (a SPEC would be "not a probe point"), and nothing in the kernel changes."""
    directory, binary = lab
    _, env = set_up
    definitions_before = ours(tracefs_root)
    counting = as_student(student, directory, sys.executable, "-m", "kprobe_tui", "count", f"{GROUP}:hit", "--by", "comm",
                          "--json", env=env)
    announced = b""  # the engine line, once the events are open
    while not announced.endswith(b"\n") and (byte := os.read(counting.stderr.fileno(), 1)):
        announced += byte
    assert b"user engine" in announced, announced.decode() + counting.stderr.read()
    subprocess.run([str(binary), str(CALLS)], capture_output=True, check=True)
    counting.send_signal(signal.SIGINT)
    out, err = counting.communicate(timeout=60)
    assert counting.returncode == 0, err
    [final] = [json.loads(line) for line in out.splitlines()]
    assert [(entry["key"], entry["count"]) for entry in final["entries"]] == [({"comm": "tvg"}, CALLS)], out
    assert ours(tracefs_root) == definitions_before


def test_the_statistics_view_in_lab_mode_counts_the_administrators_event(student, lab, set_up, tracefs_root):
    """The app as the student: l, the administrator's probe, a: the statistics view counts that event by comm
    as the student's reader reads it (no hand-off), v: a histogram of its field n; nothing is made or changed."""
    directory, binary = lab
    _, env = set_up
    definitions_before = ours(tracefs_root)

    def drive() -> dict:
        import asyncio

        os.environ.update(env)
        from kprobe_tui.kernel.sources import locate
        from kprobe_tui.probes.binary import BinaryCatalog
        from kprobe_tui.tui.app import KprobeTui
        from kprobe_tui.tui.screens.stats import StatsScreen

        seen: dict = {}

        def counted(stats) -> int:
            return stats.result.count if stats.result is not None else 0

        async def main() -> None:
            app = KprobeTui(locate(mount=False), BinaryCatalog(binary))
            async with app.run_test(size=(80, 24)) as pilot:
                stats = await on_probe(pilot, app, f"{GROUP}/hit", "a")
                seen["stats"] = isinstance(stats, StatsScreen)
                await wait_for(pilot, lambda: stats.choice is not None or stats.error)
                seen["choice"] = (stats.choice.engine, stats.choice.method) if stats.choice else stats.error
                subprocess.run([str(binary), str(CALLS)], capture_output=True, check=True)
                await wait_for(pilot, lambda: counted(stats) == CALLS)
                seen["count"] = [(list(entry.key), entry.count) for entry in stats.result.entries] if stats.result else None
                await pilot.press("v")
                await wait_for(pilot, lambda: stats.choice is not None and stats.request.value == "n")
                await wait_for(pilot, lambda: stats.sample is not None)
                subprocess.run([str(binary), str(CALLS)], capture_output=True, check=True)
                await wait_for(pilot, lambda: counted(stats) == CALLS)
                seen["hist"] = (stats.request.kind, counted(stats), stats.result.total.sum if stats.result else None)
                seen["command"] = stats.request.command()

        asyncio.run(main())
        return seen

    seen = as_user(student, drive, read_everything=True, home=directory)
    assert seen["stats"] and seen["choice"] == ["user", "perf"], seen  # (lists: the answer came back as JSON)
    assert seen["count"] == [[["tvg"], CALLS]], seen
    assert seen["hist"] == ["hist", CALLS, sum(range(100, 100 + CALLS))], seen
    assert seen["command"] == ["kprobe-tui", "hist", f"{GROUP}:hit", "n", "--by", "comm"]
    assert ours(tracefs_root) == definitions_before


def test_a_probe_the_administrator_makes_meanwhile_is_listed_and_followed_without_a_restart(
        student, lab, paranoid_minus_one, tracefs_root):
    """The hand-off's loop closed: the student's probes panel is open when the administrator makes GROUP:late
    (as the copied command would); it shows up in the panel, and t follows its calls."""
    directory, binary = lab
    panel_open = directory / "panel-open"

    def administrator() -> None:  # root, in the test's process, once the student's panel is up
        for _ in range(600):
            if panel_open.exists():
                break
            time.sleep(0.1)
        subprocess.run([sys.executable, "-m", "kprobe_tui", "probe", "-x", str(binary), "-g", GROUP, "late=hit", "n"],
                       cwd=PROJECT, capture_output=True, check=True)

    def drive() -> dict:
        import asyncio

        from kprobe_tui.kernel.sources import locate
        from kprobe_tui.probes.binary import BinaryCatalog
        from kprobe_tui.tui.app import KprobeTui
        from kprobe_tui.tui.screens.events import EventsScreen

        seen: dict = {}

        async def main() -> None:
            app = KprobeTui(locate(mount=False), BinaryCatalog(binary))
            async with app.run_test(size=(80, 24)) as pilot:
                await pilot.press("l")
                panel = app.screen
                await wait_for(pilot, lambda: f"{GROUP}/hit" in panel.shown)
                seen["before"] = f"{GROUP}/late" in panel.shown
                panel_open.write_text("")
                seen["listed"] = await wait_for(pilot, lambda: f"{GROUP}/late" in panel.shown)
                table = panel.query_one("DataTable")
                table.move_cursor(row=table.get_row_index(f"{GROUP}/late"))
                await pilot.press("t")
                events = app.screen
                await wait_for(pilot, lambda: isinstance(events, EventsScreen) and events.session is not None)
                subprocess.run([str(binary), str(CALLS)], capture_output=True, check=True)
                seen["followed"] = await wait_for(pilot, lambda: len(events.store) == CALLS)
                seen["names"] = sorted({event.event for event in events.store.view_rows(0, len(events.store))})

        asyncio.run(main())
        return seen

    helper = threading.Thread(target=administrator)
    helper.start()
    try:
        seen = as_user(student, drive, read_everything=True, home=directory)
    finally:
        panel_open.write_text("")  # the administrator stops waiting, whatever happened
        helper.join()
        subprocess.run([sys.executable, "-m", "kprobe_tui", "probe", "-d", f"{GROUP}:late"], cwd=PROJECT, capture_output=True)
    assert seen == {"before": False, "listed": True, "followed": True, "names": ["late"]}, seen
