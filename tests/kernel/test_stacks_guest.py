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
from collections.abc import Callable
from pathlib import Path

import pytest
from harness import PROJECT

from kprobe_tui.stream.stacks import frame_symbol

sys.path.insert(0, str(PROJECT / "tests" / "debuginfo"))
from test_kernel_frames import addresses, expected_stack  # noqa: E402
from test_perf_dropin_guest import VMLINUX, debug_vmlinux_where_debian_puts_it  # noqa: E402, F401 (a fixture)

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


def static_program(directory: Path, name: str, source: str) -> Path:
    """A workload compiled static (no loader's reads), for a test that needs bpftrace beside it."""
    if shutil.which("bpftrace") is None:
        pytest.skip("bpftrace is not installed (Debian's bpftrace package)")
    (directory / f"{name}.c").write_text(source)
    subprocess.run(["gcc", "-O1", "-static", "-o", str(directory / name), str(directory / f"{name}.c")], check=True)
    return directory / name


@pytest.fixture
def workload(tmp_path) -> Path:
    return static_program(tmp_path, COMM, WORKLOAD % {"pipe": PIPE_READS, "zero": ZERO_PREADS, "file": FILE_READS})


def start(command: list[str], out: Path, err: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    with open(out, "w") as stdout, open(err, "w") as stderr:
        return subprocess.Popen(command, stdout=stdout, stderr=stderr, cwd=PROJECT, start_new_session=True,
                                env=env and {**os.environ, **env})


# bpftrace 0.17 prints "Attaching" and runs BEGIN *before* it attaches its other probes (BPFtrace::run), so
# neither says they are on: CI runs in both guests saw bpftrace count none of the workload's reads after either.
# It tells its own test runner, on stderr, once every probe is attached.
ATTACHED = "__BPFTRACE_NOTIFY_PROBES_ATTACHED"


def start_bpftrace(program: str, tmp_path: Path) -> subprocess.Popen:
    """bpftrace running ``program`` (to bpftrace.out and .err in ``tmp_path``), once its probes are attached."""
    tracer = start(["bpftrace", "-e", program], tmp_path / "bpftrace.out", tmp_path / "bpftrace.err", {ATTACHED: "1"})
    try:
        wait_for(tmp_path / "bpftrace.err", ATTACHED, tracer)
    except BaseException:
        stop_bpftrace(tracer)
        raise
    return tracer


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


def stop_bpftrace(tracer: subprocess.Popen, limit: float = 240) -> None:
    """bpftrace 0.17 can miss its Ctrl-C: its poll loop leaves only on an interrupted epoll_wait, so a signal that
    comes as a wait times out (its 100 ms tick) sets the exit flag and nothing reads it (BPFtrace::poll_perf_events
    at v0.17.0; upstream reads the flag there since 67d4bd7, February 2023), and it runs on until killed, its map
    never printed. SIGTERM sets the same flag and stays caught while the maps print, so it is sent every few
    seconds until bpftrace has ended."""
    deadline = time.monotonic() + limit
    while tracer.poll() is None and time.monotonic() < deadline:
        os.killpg(tracer.pid, signal.SIGTERM)
        try:
            tracer.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
    stop(tracer)


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


# Twice in CI (once in each guest, each time after the rest of the guest suite) bpftrace printed nothing but
# "Attaching 1 probe..." while both our engines counted every read the workload makes; in runs of these files
# alone it always answered. bpftrace printing no map sends the whole run (all three tracers) again.
ORACLE_ATTEMPTS = 3


def agreeing(ours: list[str], bpftrace: str, workload: Path, tmp_path: Path, theirs: Callable[[str], dict],
             mine: Callable[[str], dict]) -> dict:
    """Our command's answer with the kernel engine, once it equals bpftrace's program's (read by ``theirs``) and
    the user-space engine's equals it (read by ``mine``), all three tracing one run of the workload."""
    printed = side_by_side(ours, bpftrace, workload, tmp_path)
    answers = theirs(printed["bpftrace"]), mine(printed["kernel"]), mine(printed["user"])
    print("bpftrace", answers[0], "\nkernel", answers[1], "\nuser", answers[2], sep="\n")
    assert answers[1] == answers[0]
    assert answers[2] == answers[1]
    return answers[1]


def side_by_side(ours: list[str], bpftrace: str, workload: Path, tmp_path: Path,
                 engines: tuple[str, ...] = ("kernel", "user")) -> dict[str, str]:
    """What bpftrace's program and our command (with the kernel engine and with the user-space one) printed,
    all tracing one run of the workload; the run again when bpftrace printed no map."""
    for attempt in range(1, ORACLE_ATTEMPTS + 1):
        printed = traced_once(ours, bpftrace, workload, tmp_path, engines)
        print(f"attempt {attempt}: bpftrace printed", printed["bpftrace"], printed["bpftrace status"], sep="\n")
        if "@" in printed["bpftrace"]:
            break
    return printed


def traced_once(ours: list[str], bpftrace: str, workload: Path, tmp_path: Path, engines: tuple[str, ...]) -> dict[str, str]:
    tracers = {name: start(ours + ["--engine", name], tmp_path / f"{name}.out", tmp_path / f"{name}.err")
               for name in engines}
    try:
        tracers["bpftrace"] = start_bpftrace(bpftrace, tmp_path)
        for name in engines:
            wait_for(tmp_path / f"{name}.err", f"{name} engine", tracers[name])
        subprocess.run([str(workload)], check=True)
        time.sleep(2)
    finally:
        for name, tracer in tracers.items():
            if name == "bpftrace":
                stop_bpftrace(tracer)
            else:
                stop(tracer)
    printed = {name: (tmp_path / f"{name}.out").read_text() for name in tracers}
    printed["bpftrace status"] = f"exit {tracers['bpftrace'].returncode}, stderr: {(tmp_path / 'bpftrace.err').read_text()}"
    return printed


def test_who_calls_vfs_read_kernel_engine_equals_bpftrace_and_the_user_engine_agrees(workload, tracefs, tmp_path):
    kernel = agreeing([sys.executable, "-m", "kprobe_tui", "count", "vfs_read", "--by", "stack", "--json",
                       "--filter", f'comm == "{COMM}"'], f'kprobe:vfs_read /comm == "{COMM}"/ {{ @[kstack] = count(); }}',
                      workload, tmp_path, bpftrace_stacks, our_stacks)
    by_caller: Counter = Counter()
    for stack, hits in kernel.items():
        by_caller[stack[-2]] += hits
    assert by_caller == {"ksys_read": PIPE_READS + FILE_READS, "__x64_sys_pread64": ZERO_PREADS}
    assert all(stack[-1] == "vfs_read" for stack in kernel)



def test_with_the_kernels_debug_info_installed_each_frame_has_the_line_addr2line_gives(
        workload, tracefs, tmp_path, debug_vmlinux_where_debian_puts_it):  # noqa: F811
    """As Debian's linux-image-*-dbg installs it: every frame of a C function gets its file:line (a return
    address its call's) and the functions inlined there, as binutils' addr2line -i -f gives them on the same
    vmlinux."""
    if not VMLINUX.exists():
        pytest.skip(f"{VMLINUX.name} is not cached (the suite caches 6.1's: tests/debuginfo/kernel_debug.py)")
    count = start([sys.executable, "-m", "kprobe_tui", "count", "vfs_read", "--by", "stack", "--json",
                   "--filter", f'comm == "{COMM}"'], tmp_path / "count.out", tmp_path / "count.err")
    try:
        wait_for(tmp_path / "count.err", "kernel engine", count)
        subprocess.run([str(workload)], check=True)
        time.sleep(2)
    finally:
        stop(count)
    record = json.loads((tmp_path / "count.out").read_text())
    stacks = [tuple(entry["stack"]) for entry in record["stacks"]]
    printed = [tuple(frame.split(" ", 1)[0] for frame in stack if " (inlined) " not in frame) for stack in stacks]
    # an assembly label (entry_SYSCALL_64_after_hwframe) has no function symbol: left as printed, unlined
    lined = {frame_symbol(frame) for stack in stacks for frame in stack if " " in frame and " (inlined) " not in frame}
    assert {"do_syscall_64", "ksys_read", "__x64_sys_pread64", "vfs_read"} <= lined, stacks
    start_of = addresses(VMLINUX, lined)
    assert stacks == [expected_stack(VMLINUX, stack, start_of) for stack in printed]
    assert all(" read_write.c:" in stack[-1] for stack in stacks), stacks
    assert any(frame.startswith("ksys_pread64 (inlined) read_write.c:") for stack in stacks for frame in stack), stacks
