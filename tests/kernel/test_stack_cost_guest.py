"""The kernel engine's side of ``count --by stack``'s estimate (issue 28): a program read()s /dev/zero at a
rate it keeps itself (a busy wait to each read's due time) and prints the rate it kept; the estimate,
measured on vfs_read filtered to its comm, must be that rate within a factor, priced at the kernel
engine's figure, and nothing is left in the kernel once the run ends."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness import PROJECT

pytestmark = pytest.mark.kernel

TRACING = Path("/sys/kernel/tracing")
COMM = "kpt-pacedread"
PACED_READS = r"""
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
int main(int argc, char **argv) {
    double rate = atof(argv[1]), seconds = atof(argv[2]), start = now(), due = start;
    long reads = 0; char byte; int zero = open("/dev/zero", O_RDONLY);
    while (due - start < seconds) {
        while (now() < due) ;
        if (read(zero, &byte, 1) != 1) return 2;
        due = start + ++reads / rate;
    }
    printf("%.1f\n", reads / (now() - start));
    return 0;
}
"""
ESTIMATE = re.compile(r"kprobe-tui: vfs_read: ~([\d,]+) hits/s; counting its stacks in the kernel costs .* "
                      r"\(~2 us a hit, an emulated guest's figure scaled\)")


def test_the_kernel_engine_estimate_is_the_rate_the_program_kept(tmp_path):
    (tmp_path / "paced.c").write_text(PACED_READS)
    subprocess.run(["gcc", "-O1", "-o", str(tmp_path / COMM), str(tmp_path / "paced.c")], check=True)
    before = (TRACING / "kprobe_events").read_text(), sorted(p.name for p in (TRACING / "instances").iterdir())
    program = subprocess.Popen([str(tmp_path / COMM), "1000", "40"], stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(1.0)
        run = subprocess.run([sys.executable, "-m", "kprobe_tui", "count", "vfs_read", "--by", "stack", "--filter",
                              f'comm == "{COMM}"', "-d", "1", "--json"], cwd=PROJECT, capture_output=True, text=True,
                             stdin=subprocess.DEVNULL, timeout=110)
    finally:
        program.kill()
    program.wait()
    assert run.returncode == 0, run.stderr
    assert "kernel engine" in run.stderr, run.stderr
    measured = float(ESTIMATE.search(run.stderr)[1].replace(",", ""))
    assert 1000 / 1.5 < measured < 1000 * 1.5, run.stderr
    assert ((TRACING / "kprobe_events").read_text(), sorted(p.name for p in (TRACING / "instances").iterdir())) == before
