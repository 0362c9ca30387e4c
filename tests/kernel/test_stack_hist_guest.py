"""What vfs_read is asked for, by who calls it: ``hist vfs_read count --by stack`` against bpftrace's
``@[kstack] = hist(arg2)`` (Debian's 0.17, the oracle) on one run of a static program whose paths read known
sizes: read() of a pipe (1 byte) and of a file (4 bytes) through ksys_read, pread() of /dev/zero (16 bytes)
through __x64_sys_pread64. bpftrace, the kernel engine and the user-space engine trace the same run."""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from test_stacks_guest import agreeing, static_program

from kprobe_tui.stream.stacks import frame_symbol

pytestmark = pytest.mark.kernel

COMM = "sizework"
PIPE_READS, ZERO_PREADS, FILE_READS = 5, 7, 3
WORKLOAD = r"""
#include <fcntl.h>
#include <unistd.h>
int main(int argc, char **argv) {
    char buffer[16]; int ends[2];
    if (pipe(ends)) return 1;
    for (int i = 0; i < %(pipe)d; i++) { if (write(ends[1], "x", 1) != 1 || read(ends[0], buffer, 1) != 1) return 2; }
    int zero = open("/dev/zero", O_RDONLY);
    for (int i = 0; i < %(zero)d; i++) { if (pread(zero, buffer, 16, 0) != 16) return 3; }
    int file = open(argv[0], O_RDONLY);
    for (int i = 0; i < %(file)d; i++) { if (read(file, buffer, 4) != 4) return 4; }
    return 0;
}
"""
Histograms = dict[tuple[str, ...], dict[tuple[int, int], int]]  # stack of symbols -> (low, high) -> hits


@pytest.fixture
def workload(tmp_path) -> Path:
    return static_program(tmp_path, COMM, WORKLOAD % {"pipe": PIPE_READS, "zero": ZERO_PREADS, "file": FILE_READS})


# "[1]      5 |@@@|", "[4, 8)      3 |@@|" or "[16K, 32K)      3 |@@|": bpftrace's buckets (K is 1024)
BUCKET = re.compile(r"\[(\d+[KMG]?)(?:, (\d+[KMG]?)\)|\])\s+(\d+) \|")
SUFFIXES = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def bucket_bound(text: str) -> int:
    return int(text[:-1]) * SUFFIXES[text[-1]] if text[-1] in SUFFIXES else int(text)


def bpftrace_histograms(text: str, frame_key: Callable[[str], object] = frame_symbol) -> Histograms:
    """``@[`` frames ``]:`` then bucket lines up to a blank one, per stack (outermost first), each frame as
    ``frame_key`` gives it (its function's name)."""
    found: Histograms = {}
    frames: list[str] | None = None
    buckets: dict[tuple[int, int], int] | None = None
    for line in text.splitlines():
        if line == "@[":
            frames = []
        elif frames is not None and line.startswith("]:"):
            buckets = found.setdefault(tuple(frame_key(frame) for frame in reversed(frames)), {})
            frames = None
        elif frames is not None:
            frames.append(line.strip())
        elif buckets is not None and (match := BUCKET.match(line)):
            low = bucket_bound(match[1])
            if int(match[3]):
                buckets[low, bucket_bound(match[2]) if match[2] else low + 1] = int(match[3])
        else:
            buckets = None
    return found


def our_histograms(text: str) -> Histograms:
    record = json.loads(text.splitlines()[-1])
    assert record["kind"] == "hist" and record["final"] and not record.get("dropped")
    found: Histograms = {}
    for entry in record["entries"]:
        buckets = found.setdefault(tuple(frame_symbol(frame) for frame in entry["key"]["stack"]), {})
        for each in entry["buckets"]:
            if each["count"]:
                key = (each["low"], each["high"])
                buckets[key] = buckets.get(key, 0) + each["count"]
    return found


def test_a_histogram_by_stack_of_the_kernel_engine_equals_bpftrace_and_the_user_engine_agrees(workload, tracefs, tmp_path):
    kernel = agreeing([sys.executable, "-m", "kprobe_tui", "hist", "vfs_read", "count", "--by", "stack", "--json",
                       "--filter", f'comm == "{COMM}"'], f'kprobe:vfs_read /comm == "{COMM}"/ {{ @[kstack] = hist(arg2); }}',
                      workload, tmp_path, bpftrace_histograms, our_histograms)
    by_caller: dict[str, Counter] = {}
    for stack, buckets in kernel.items():
        by_caller.setdefault(stack[-2], Counter()).update(buckets)
    assert by_caller == {"ksys_read": {(1, 2): PIPE_READS, (4, 8): FILE_READS}, "__x64_sys_pread64": {(16, 32): ZERO_PREADS}}
