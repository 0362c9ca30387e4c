"""The statistics view's runner keyed by stack with the kernel engine, inside the guests: the hist trigger keyed
by the kernel stack (``stacktrace`` on 6.1, ``common_stacktrace`` on 6.12) answers what the view shows, its
samples' intervals add up to its total (the kernel's table is cumulative), and closing removes the trigger,
its instance and the probe (the ``tracefs`` fixture). The workload is tests/kernel/test_stacks_guest.py's:
7 pread()s of /dev/zero, each one call of vfs_read from __x64_sys_pread64 (nothing else in the idle guest
preads). The runner alone, without Textual: Python runs 15-25x slower here."""

from __future__ import annotations

import queue
import subprocess
import threading
from collections import Counter

import pytest

from kprobe_tui.aggregate.live import StatsRequest, StatsRunner
from kprobe_tui.stream.stacks import frame_symbol
from tests.kernel.test_stacks_guest import ZERO_PREADS, workload  # noqa: F401 (workload: a fixture)

pytestmark = pytest.mark.kernel


def test_the_runner_counts_vfs_read_by_kernel_stack_with_a_hist_trigger(tracefs, guest_sources, workload):  # noqa: F811
    runner = StatsRunner(guest_sources, alive=lambda: True)
    news: queue.SimpleQueue = queue.SimpleQueue()
    worker = threading.Thread(target=runner.loop, args=(news.put,))
    worker.start()
    try:
        runner.ask(1, StatsRequest(("vfs_read",), key="stack", engine="hist"))
        kind, _, details = news.get(timeout=300)
        assert kind == "estimated" and details[0].engine == "kernel", details  # its cost is said before it starts
        kind, _, details = news.get(timeout=300)
        assert kind == "started", details
        assert (details[0].engine, details[0].method) == ("kernel", "hist"), details
        subprocess.run([str(workload)], check=True)
        intervals = 0
        while True:
            kind, _, details = news.get(timeout=300)
            assert kind == "sampled", details
            sample = details[0]
            intervals += sample.interval.count
            by_caller: Counter = Counter()
            for entry in sample.total.entries:
                by_caller[frame_symbol(entry.key[0][-2])] += entry.count
            if by_caller["__x64_sys_pread64"] >= ZERO_PREADS:
                break
        assert by_caller["__x64_sys_pread64"] == ZERO_PREADS, by_caller
        assert sample.total.key_names == ("stack",) and sample.total.engine == "kernel"
        assert all(frame_symbol(entry.key[0][-1]) == "vfs_read" for entry in sample.total.entries)
        assert intervals == sample.total.count  # the cumulative table's samples told apart, none counted twice
    finally:
        runner.close()
        worker.join(300)
    assert runner.closed.is_set()
