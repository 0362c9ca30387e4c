"""How long vfs_read takes, by who calls it: ``latency vfs_read --by stack`` against bpftrace's
``@[@stack[tid]] = hist((nsecs - @start[tid]) / 1000)`` (Debian's 0.17, the oracle; the entry's kstack kept per
thread until its return) on one run of a static program: reads of a pipe that each wait for a child writing
20 ms later, and reads of a file that do not wait. Both trace the same calls; their times differ by each
other's probes, so the paths and the calls per path are compared exactly, the times by the waits."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from test_stack_hist_guest import bpftrace_histograms
from test_stacks_guest import side_by_side, static_program

from kprobe_tui.aggregate.offer import detect

pytestmark = pytest.mark.kernel

COMM = "slowpipe"
PIPE_READS, FILE_READS, WAIT_US = 3, 4, 20_000
WORKLOAD = r"""
#include <fcntl.h>
#include <time.h>
#include <unistd.h>
int main(int argc, char **argv) {
    char byte; int ends[2];
    if (pipe(ends)) return 1;
    for (int i = 0; i < %(pipe)d; i++) {
        if (fork() == 0) { struct timespec t = {0, %(wait)d * 1000}; nanosleep(&t, 0); _exit(write(ends[1], "x", 1) != 1); }
        if (read(ends[0], &byte, 1) != 1) return 2;
    }
    int file = open(argv[0], O_RDONLY);
    for (int i = 0; i < %(file)d; i++) { if (read(file, &byte, 1) != 1) return 4; }
    return 0;
}
"""
BPFTRACE = (f'kprobe:vfs_read /comm == "{COMM}"/ {{ @start[tid] = nsecs; @stack[tid] = kstack; }} '
            'kretprobe:vfs_read /@start[tid]/ { @[@stack[tid]] = hist((nsecs - @start[tid]) / 1000); '
            'delete(@start[tid]); delete(@stack[tid]); } END { clear(@start); clear(@stack); }')
# "ksys_read+183" (bpftrace) and "ksys_read+0xb7" or "ksys_read+0xb7 read_write.c:613" (ours): a frame's place
FRAME = re.compile(r"([A-Za-z_][\w.]*)\+(0x[0-9a-f]+|\d+)")


def place(frame: str) -> tuple[str, int]:
    match = FRAME.match(frame)
    assert match, frame
    return match[1], int(match[2], 0)


def paths(histograms: dict) -> dict[tuple, dict]:
    """Stacks by their callers' return addresses (the probed function's own frame by name: bpftrace's is +1)."""
    return {(stack[-1][0],) + stack[:-1]: buckets for stack, buckets in histograms.items()}


@pytest.fixture
def workload(tmp_path) -> Path:
    return static_program(tmp_path, COMM, WORKLOAD % {"pipe": PIPE_READS, "file": FILE_READS, "wait": WAIT_US})


def test_a_latency_by_stack_has_bpftraces_paths_and_calls_and_the_waiting_reads_on_their_own_path(workload, tracefs, tmp_path):
    """The kernel engine where synthetic events take a stack (6.12), the user-space engine on every kernel."""
    engines = ("kernel", "user") if detect(tracefs).synthetic_stacks else ("user",)
    printed = side_by_side([sys.executable, "-m", "kprobe_tui", "latency", "vfs_read", "--by", "stack", "--json",
                            "--filter", f'comm == "{COMM}"'], BPFTRACE, workload, tmp_path, engines=engines)
    theirs = paths(bpftrace_histograms(printed["bpftrace"], place))
    print("bpftrace", theirs, sep="\n")
    for engine in engines:
        said = (tmp_path / f"{engine}.err").read_text()
        where = "in the kernel" if engine == "kernel" else "in user space"
        assert f"counting its stacks {where} costs" in said, said
        record = json.loads(printed[engine].splitlines()[-1])
        assert record["kind"] == "latency" and record["final"] and record["unit"] == "us", record
        ours = paths({tuple(place(frame) for frame in entry["key"]["stack"]): {(each["low"], each["high"]): each["count"]
                      for each in entry["buckets"] if each["count"]} for entry in record["entries"]})
        print(engine, ours, sep="\n")
        assert {path: sum(buckets.values()) for path, buckets in ours.items()} == \
               {path: sum(buckets.values()) for path, buckets in theirs.items()}
        assert sorted(sum(buckets.values()) for buckets in ours.values()) == [PIPE_READS, FILE_READS]
        for answer in (ours, theirs):  # the reads that waited are the pipe's path's, all of them, and only they
            waited = {path for path, buckets in answer.items() if all(low >= WAIT_US // 2 for low, _ in buckets)}
            assert [sum(answer[path].values()) for path in waited] == [PIPE_READS], answer
        waits = next(entry for entry in record["entries"] if entry["min"] >= WAIT_US)  # exact, not a bucket's bound
        assert waits["count"] == PIPE_READS and waits["max"] < 2 * WAIT_US and waits["min"] not in (16384, 32767)
