"""The bpftrace line the builder shows and F4 copies, run verbatim by bpftrace (Debian's 0.17, the oracle for
aggregations) in a guest, where BPF runs: an entry probe with a captured register and a filter prints what our
probe records; a line inside a function is refused by this build, as the line's comment says."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from harness import PROJECT

from kprobe_tui.probes import pipeline
from kprobe_tui.probes.render import command_rows

pytestmark = pytest.mark.kernel

LAB = PROJECT / "tests" / "tui" / "c" / "lab_walk.c"  # main calls work(3) once a pass


@pytest.fixture
def lab(tmp_path) -> Path:
    if shutil.which("bpftrace") is None:
        pytest.skip("bpftrace is not installed (Debian's bpftrace package)")
    subprocess.run(["gcc", "-O0", "-g", "-o", str(tmp_path / "lab"), str(LAB)], check=True)
    return tmp_path / "lab"


def bpftrace_line(lab: Path, *words: str, filter: str | None = None) -> str:
    request = pipeline.ProbeRequest(words, binary=str(lab), run_group="kptui_1", filter=filter, displayed=True)
    plan = pipeline.plan(request, pipeline.ProbeTarget())
    [line] = [command for label, command in command_rows(plan.spec, plan.probes) if label == "bpftrace"]
    return line


def run_verbatim(line: str, lab: Path, out: Path) -> tuple[int, str, str]:
    """The copied line in a shell; once its probe fires (bpftrace says "Attaching" before it has), the lab run
    twice more, then Ctrl-C. Returns the exit status, and what it printed after it fired, and on stderr."""
    with open(out, "w") as stdout:
        tracer = subprocess.Popen(["sh", "-c", line], stdout=stdout, stderr=subprocess.PIPE, text=True,
                                  start_new_session=True)
    try:
        for _ in range(120):  # attaching takes seconds under TCG
            if tracer.poll() is not None or "work" in out.read_text():
                break
            subprocess.run([str(lab), "1"], check=True, capture_output=True)
            time.sleep(0.5)
        fired = out.read_text()
        if tracer.poll() is None:
            subprocess.run([str(lab), "2"], check=True, capture_output=True)
            time.sleep(1)
            os.killpg(tracer.pid, signal.SIGINT)  # bpftrace, whether sh ran it as a child or exec'd it
        try:
            _, err = tracer.communicate(timeout=60)
        except subprocess.TimeoutExpired:  # seen once under TCG: bpftrace never ended after Ctrl-C
            os.killpg(tracer.pid, signal.SIGKILL)
            _, err = tracer.communicate()
    finally:
        if tracer.poll() is None:
            os.killpg(tracer.pid, signal.SIGKILL)
    return tracer.returncode, out.read_text()[len(fired):], err


def test_an_entry_probes_bpftrace_line_runs_verbatim_and_prints_what_we_record(lab, tracefs, tmp_path):
    line = bpftrace_line(lab, "work", "n=%di:s32", filter="n >= 3")
    assert "#" not in line  # bpftrace reads all of it
    status, printed, err = run_verbatim(line, lab, tmp_path / "out")
    assert status in (0, -signal.SIGINT, -signal.SIGKILL) and not err, err
    assert [row for row in printed.splitlines() if row.startswith("work ")] == ["work n=3", "work n=3"]


def test_a_line_inside_a_function_is_refused_by_this_bpftrace_as_the_comment_says(lab, tracefs, tmp_path):
    line = bpftrace_line(lab, "work:3")
    assert line.count("uprobe:") == 4 and line.endswith("(Debian's 0.17 refuses it)")
    status, _, err = run_verbatim(line, lab, tmp_path / "out")
    assert status not in (0, -signal.SIGINT) and "Can't check if uprobe is in proper place" in err
