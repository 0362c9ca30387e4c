"""Who calls vfs_read: ``count vfs_read --by stack`` against bpftrace's ``@[kstack] = count()`` (Debian's 0.17,
the oracle) on the same run of a workload whose call paths are known: a static program (no loader reads)
that read()s a pipe and a file and pread()s /dev/zero, each a known number of times. bpftrace, the kernel
engine and the user-space engine trace that one run side by side, each filtered to the workload's comm;
frames are compared by function name (bpftrace prints ``vfs_read+5``, the kernel ``vfs_read+0x5``)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from harness import PROJECT

from kprobe_tui.stream.stacks import frame_symbol

pytestmark = pytest.mark.kernel

COMM = "stackwork"
PIPE_READS, ZERO_PREADS, FILE_READS = 5, 7, 3
WORKLOAD = r"""
#include <fcntl.h>
#include <unistd.h>
int main(int argc, char **argv) {
    char byte; int ends[2];
    if (pipe(ends)) return 1;
    for (int i = 0; i < %(pipe)d; i++) { if (write(ends[1], "x", 1) != 1 || read(ends[0], &byte, 1) != 1) return 2; }
    int zero = open("/dev/zero", O_RDONLY);
    for (int i = 0; i < %(zero)d; i++) { if (pread(zero, &byte, 1, 0) != 1) return 3; }
    int file = open(argv[0], O_RDONLY);
    for (int i = 0; i < %(file)d; i++) { if (read(file, &byte, 1) != 1) return 4; }
    return 0;
}
"""


@pytest.fixture
def workload(tmp_path) -> Path:
    if shutil.which("bpftrace") is None:
        pytest.skip("bpftrace is not installed (Debian's bpftrace package)")
    source = tmp_path / "stackwork.c"
    source.write_text(WORKLOAD % {"pipe": PIPE_READS, "zero": ZERO_PREADS, "file": FILE_READS})
    subprocess.run(["gcc", "-O1", "-static", "-o", str(tmp_path / COMM), str(source)], check=True)
    return tmp_path / COMM


def start(command: list[str], out: Path, err: Path) -> subprocess.Popen:
    with open(out, "w") as stdout, open(err, "w") as stderr:
        return subprocess.Popen(command, stdout=stdout, stderr=stderr, cwd=PROJECT, start_new_session=True)


def wait_for(path: Path, text: str, tracer: subprocess.Popen, limit: float = 300) -> None:
    deadline = time.monotonic() + limit
    while text not in path.read_text():
        assert tracer.poll() is None and time.monotonic() < deadline, path.read_text()
        time.sleep(0.5)


def stop(tracer: subprocess.Popen) -> None:
    if tracer.poll() is None:
        os.killpg(tracer.pid, signal.SIGINT)
    try:
        tracer.wait(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(tracer.pid, signal.SIGKILL)
        tracer.wait()


def bpftrace_stacks(text: str) -> Counter:
    """``@[\\n    inner+5\\n    outer+9\\n]: N`` entries -> Counter of symbol stacks, outermost first."""
    stacks: Counter = Counter()
    frames: list[str] | None = None
    for line in text.splitlines():
        if line == "@[":
            frames = []
        elif frames is not None and line.startswith("]: "):
            stacks[tuple(frame_symbol(frame) for frame in reversed(frames))] += int(line[3:])
            frames = None
        elif frames is not None:
            frames.append(line.strip())
    return stacks


def our_stacks(text: str) -> Counter:
    record = json.loads(text)
    assert record["dropped"] == 0
    stacks: Counter = Counter()
    for entry in record["stacks"]:
        stacks[tuple(frame_symbol(frame) for frame in entry["stack"])] += entry["count"]
    return stacks


def test_who_calls_vfs_read_kernel_engine_equals_bpftrace_and_the_user_engine_agrees(workload, tracefs, tmp_path):
    count = [sys.executable, "-m", "kprobe_tui", "count", "vfs_read", "--by", "stack", "--json",
             "--filter", f'comm == "{COMM}"']
    tracers = {
        "bpftrace": start(["bpftrace", "-e", f'kprobe:vfs_read /comm == "{COMM}"/ {{ @[kstack] = count(); }}'],
                          tmp_path / "bpftrace.out", tmp_path / "bpftrace.err"),
        "kernel": start(count + ["--engine", "kernel"], tmp_path / "kernel.out", tmp_path / "kernel.err"),
        "user": start(count + ["--engine", "user"], tmp_path / "user.out", tmp_path / "user.err"),
    }
    try:
        wait_for(tmp_path / "bpftrace.out", "Attaching", tracers["bpftrace"])
        for name in ("kernel", "user"):
            wait_for(tmp_path / f"{name}.err", f"{name} engine", tracers[name])
        time.sleep(2)  # bpftrace says "Attaching" before its probe is on
        subprocess.run([str(workload)], check=True)
        time.sleep(2)
    finally:
        for tracer in tracers.values():
            stop(tracer)
    bpftrace = bpftrace_stacks((tmp_path / "bpftrace.out").read_text())
    kernel = our_stacks((tmp_path / "kernel.out").read_text())
    user = our_stacks((tmp_path / "user.out").read_text())
    print("bpftrace", bpftrace, "\nkernel", kernel, "\nuser", user, sep="\n")
    assert kernel == bpftrace
    assert user == kernel
    by_caller: Counter = Counter()
    for stack, hits in kernel.items():
        by_caller[stack[-2]] += hits
    assert by_caller == {"ksys_read": PIPE_READS + FILE_READS, "__x64_sys_pread64": ZERO_PREADS}
    assert all(stack[-1] == "vfs_read" for stack in kernel)
