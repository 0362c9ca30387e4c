"""On this machine's tracefs: a histogram of a string is refused before any probe is made (it was exit 70
at the first hit), and nothing is left in the kernel."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.unit.test_no_internal_error import PROJECT, assert_clean, build_struct_program

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def struct_program(tmp_path_factory) -> Path:
    return build_struct_program(tmp_path_factory)


def test_a_histogram_of_a_string_is_refused_and_leaves_nothing(struct_program, tracefs_root):
    stop = threading.Event()

    def workload() -> None:  # hits while the run would trace: the old code failed at the first one
        while not stop.is_set():
            subprocess.run([str(struct_program)], check=False)

    hitting = threading.Thread(target=workload)
    hitting.start()
    try:
        proc = subprocess.run([sys.executable, "-m", "kprobe_tui", "hist", "-x", str(struct_program), "work",
                               "name=r->name:string", "-d", "3"], cwd=PROJECT, capture_output=True, text=True,
                              timeout=120)
    finally:
        stop.set()
        hitting.join()
    assert_clean(proc, "the value of a histogram must be numeric; name is captured as string")
    assert " engine: " not in proc.stderr  # refused before a probe was made
    leftovers = [line for file in ("uprobe_events", "dynamic_events")
                 for line in (tracefs_root / file).read_text().splitlines() if str(struct_program) in line]
    assert leftovers == []
