"""The statistics view's runner without a screen: it makes the run's probes, reports samples of real
uprobe hits once a second, and removes everything when closed."""

from __future__ import annotations

import queue
import threading
from pathlib import Path

import pytest

from kprobe_tui.aggregate.live import StatsRequest, StatsRunner
from kprobe_tui.kernel import lifetime
from kprobe_tui.kernel.sources import locate
from tests.aggregate_cli import build, run_workload
from tests.live.test_aggregate import leftovers

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    return build(tmp_path_factory.mktemp("runner") / "kpt_runner")


def test_the_runner_counts_hits_per_comm_and_leaves_nothing(program, tracefs_root):
    runner = StatsRunner(locate(), alive=lambda: True)
    news: queue.SimpleQueue = queue.SimpleQueue()
    worker = threading.Thread(target=runner.loop, args=(news.put,))
    worker.start()
    try:
        runner.ask(1, StatsRequest(("work",), str(program)))
        kind, generation, details = news.get(timeout=60)
        assert (kind, generation) == ("started", 1), details
        run_workload(program, "values", "100")
        while True:
            kind, generation, details = news.get(timeout=60)
            assert kind == "sampled", details
            if details[0].total.count >= 100:
                break
        counted = {entry.key[0]: entry.count for entry in details[0].total.entries}
        assert counted == {"kpt-alpha": 50, "kpt beta-2": 50}  # the workload's two threads
    finally:
        runner.close()
        worker.join(60)
    assert runner.closed.is_set()
    assert leftovers(tracefs_root, lifetime.run_name()) == []
