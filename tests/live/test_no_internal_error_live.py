"""On this machine's tracefs: a histogram of a string is refused before any probe is made (it was exit 70
at the first hit), and nothing is left in the kernel; the commands that trace, list or clean up say
"cannot write output" when stdout is a full device, and leave nothing either."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

import pytest

from kprobe_tui.kernel.tracefs import Tracefs
from kprobe_tui.probes.symbols import ElfSymbols
from tests.unit.test_no_internal_error import PROJECT, assert_clean, assert_full_device_is_a_message, build_struct_program

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def struct_program(tmp_path_factory) -> Path:
    return build_struct_program(tmp_path_factory)


@contextmanager
def calling(program: Path):
    """``program`` run again and again while the block runs."""
    stop = threading.Event()

    def workload() -> None:
        while not stop.is_set():
            subprocess.run([str(program)], check=False)

    hitting = threading.Thread(target=workload)
    hitting.start()
    try:
        yield
    finally:
        stop.set()
        hitting.join()


def test_a_histogram_of_a_string_is_refused_and_leaves_nothing(struct_program, tracefs_root):
    with calling(struct_program):  # hits while the run would trace: the old code failed at the first one
        proc = subprocess.run([sys.executable, "-m", "kprobe_tui", "hist", "-x", str(struct_program), "work",
                               "name=r->name:string", "-d", "3"], cwd=PROJECT, capture_output=True, text=True,
                              timeout=120)
    assert_clean(proc, "the value of a histogram must be numeric; name is captured as string")
    assert " engine: " not in proc.stderr  # refused before a probe was made
    assert leftovers(tracefs_root, struct_program) == []


def leftovers(tracefs_root: Path, program: Path) -> list[str]:
    return [line for file in ("uprobe_events", "dynamic_events")
            for line in (tracefs_root / file).read_text().splitlines() if str(program) in line]


@pytest.mark.parametrize("argv", [["count", "-x", "{program}", "work", "-d", "1"],
                                  ["hist", "-x", "{program}", "work", "r->n", "-d", "1"],
                                  ["latency", "-x", "{program}", "work", "-d", "1"],
                                  ["export", "{config}", "--once", "-d", "1"], ["cleanup"], ["snapshot", "{archive}"]])
def test_a_full_device_is_a_message_for_the_commands_on_the_kernel(struct_program, tracefs_root, tmp_path, argv):
    config = tmp_path / "export.toml"
    config.write_text(f'[[metric]]\nname = "calls"\nkind = "count"\nbinary = "{struct_program}"\nprobe = "work"\n')
    places = {"{program}": str(struct_program), "{config}": str(config), "{archive}": str(tmp_path / "snap.tar.gz")}
    assert_full_device_is_a_message([places.get(word, word) for word in argv], timeout=120)
    assert leftovers(tracefs_root, struct_program) == []



def test_a_full_device_is_a_message_for_tail_and_list(struct_program, tracefs_root):
    """tail prints only events and list only probes (none on an idle machine): a probe of ours on work(), hit."""
    group = f"kptfull_{os.getpid()}"
    top = Tracefs(tracefs_root)
    top.write("uprobe_events", f"p:{group}/work {struct_program}:0x{ElfSymbols(struct_program).function('work').file_offset:x}\n")
    try:
        assert_full_device_is_a_message(["list"])
        with calling(struct_program):
            assert_full_device_is_a_message(["tail", f"{group}/work", "--duration", "3"], timeout=120)
    finally:
        top.write("uprobe_events", f"-:{group}/work\n")
    assert leftovers(tracefs_root, struct_program) == []
