"""The statistics view's model, without Textual: the keys it offers are the model's, each one a valid
aggregation, and its runner reports a run that cannot start (a real thread, real sources) and closes."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from kprobe_tui.aggregate.live import StatsRequest, StatsRunner
from kprobe_tui.aggregate.model import HEADER_KEYS, LATENCY_KEYS, Aggregation, Field, keys_offered
from kprobe_tui.errors import UserError
from kprobe_tui.kernel.sources import KernelSources


def test_the_model_loads_no_terminal_library():
    ran = subprocess.run([sys.executable, "-c", "import sys, kprobe_tui.aggregate.live; "
                          "print(sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'rich')))"],
                         capture_output=True, text=True, check=True)
    assert ran.stdout.strip() == "[]"


def test_the_keys_offered_are_the_model_own():
    assert StatsRequest(("work", "len=%di:s64"), fields=("len",)).keys_offered() == [None, "comm", "pid", "len", "stack"]
    assert StatsRequest(("work*",)).keys_offered() == [None, *HEADER_KEYS, "stack"]  # a glob: per probe too
    assert StatsRequest(("work",), function="work", value="latency").keys_offered() == [None, *LATENCY_KEYS, "stack"]


@pytest.mark.parametrize("kind", ["count", "hist", "latency"])
def test_every_key_offered_makes_an_aggregation_the_model_takes(kind):
    for key in keys_offered(kind, ("len", "port"), several_probes=True):
        Aggregation(kind, (Field(key),), Field("len") if kind == "hist" else None)


def test_a_key_the_model_refuses_is_not_offered():
    with pytest.raises(UserError, match="latency is keyed by comm, pid or stack"):
        Aggregation("latency", (Field("len"),))
    assert "len" not in keys_offered("latency", ("len",))


def test_a_latency_without_a_function_is_a_user_error_not_a_crash():
    with pytest.raises(UserError, match="a latency is of a function"):
        StatsRequest(("work",), value="latency").command()


def test_a_run_that_cannot_start_is_reported_and_the_runner_closes():
    """No tracefs: the runner's thread reports why, and ``close`` ends it with nothing left to undo."""
    no_tracefs = KernelSources(None, None, Path("/proc/kallsyms"), Path("/sys/kernel/btf"), live=False)
    runner = StatsRunner(no_tracefs, alive=lambda: True)
    news: list[tuple] = []
    failed = threading.Event()

    def report(item: tuple) -> None:
        news.append(item)
        if item[0] == "failed":
            failed.set()

    worker = threading.Thread(target=runner.loop, args=(report,))
    worker.start()
    try:
        runner.ask(7, StatsRequest(("work",)))
        assert failed.wait(30), news
    finally:
        runner.close()
        worker.join(30)
    assert not worker.is_alive() and runner.closed.is_set() and runner.run is None
    assert news == [("failed", 7, ("tracefs is not mounted and could not be mounted\n"
                                   "  hint: as root: mount -t tracefs nodev /sys/kernel/tracing",))]
