"""Run ``count``/``hist``/``latency`` as a user does, around a workload: shared by the live and guest tests."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
SOURCE = PROJECT / "tests" / "live" / "c" / "aggregate.c"


def build(out: Path) -> Path:
    """tests/live/c/aggregate.c with DWARF (hist reads ``len`` by name)."""
    subprocess.run(["gcc", "-g", "-O1", "-o", str(out), str(SOURCE)], check=True)
    return out


class Aggregation:
    """``kprobe-tui COMMAND ARGS --json`` in a child; ``ready()`` once its engine runs, ``finish()`` for the results."""

    def __init__(self, *args: str, json_output: bool = True) -> None:
        self.args = args
        argv = [sys.executable, "-m", "kprobe_tui", *args] + (["--json"] if json_output else [])
        self.proc = subprocess.Popen(argv, cwd=PROJECT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.engine_line = ""
        self.stderr_lines: list[str] = []

    @property
    def name(self) -> str:
        """The run's probe group and instance name."""
        return f"kptui_{self.proc.pid}"

    def ready(self, limit: float = 300) -> str:
        """Block until the child says which engine runs (its probes and triggers are in place by then)."""
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                raise AssertionError(f"{self.args} exited {self.proc.wait()} before running: {self.stderr_lines}")
            self.stderr_lines.append(line.rstrip("\n"))
            if " engine: " in line:
                self.engine_line = line.strip()
                return self.engine_line
        raise AssertionError(f"{self.args} never said which engine runs: {self.stderr_lines}")

    def finish(self, signum: int = signal.SIGINT, timeout: float = 300) -> list[dict]:
        """Ctrl-C (or another signal) and the JSON objects it printed; the exit status is in ``returncode``."""
        if signum is not None:
            self.proc.send_signal(signum)
        out, err = self.proc.communicate(timeout=timeout)
        self.stderr_lines += err.splitlines()
        self.returncode = self.proc.returncode
        return [json.loads(line) for line in out.splitlines() if line.startswith("{")]

    def final(self, signum: int = signal.SIGINT) -> dict:
        records = self.finish(signum)
        assert self.returncode == 0, (self.returncode, self.stderr_lines)
        assert records and records[-1].get("final"), (records, self.stderr_lines)
        return records[-1]


def counts(record: dict, key: str) -> dict:
    return {entry["key"][key]: entry["count"] for entry in record["entries"]}


def buckets(record: dict) -> dict:
    return {(bucket["low"], bucket["high"]): bucket["count"] for bucket in record["buckets"] if bucket["count"]}


def run_workload(binary: Path, *args: str) -> None:
    subprocess.run([str(binary), *args], check=True, stdout=subprocess.DEVNULL)


# What tests/live/c/aggregate.c does, as the numbers an exact engine must report.
VALUES_CALLS = 100
LEN_VALUES = {value: VALUES_CALLS // 10 for value in range(-200, 800, 100)}


def expected_len_buckets() -> dict:
    """log2 buckets of len = -200..700: (..., 0) 2 values, [0] 1, [64, 128) 1, [128, 256) 1, [256, 512) 3, [512, 1K) 2."""
    return {(None, 0): 20, (0, 1): 10, (64, 128): 10, (128, 256): 10, (256, 512): 30, (512, 1024): 20}


def assert_summary_agrees_with_buckets(record: dict) -> None:
    """count, min, max and sum of a record (and of each entry) fit the buckets beside them: the count is
    theirs, the minimum in the lowest bucket hit, the maximum in the highest, the sum between the least
    and the most those buckets can hold."""
    for part in [record, *record.get("entries", [])]:
        hit = [bucket for bucket in part["buckets"] if bucket["count"]]
        assert part["count"] == sum(bucket["count"] for bucket in hit), part
        lowest, highest = hit[0], hit[-1]
        assert lowest["low"] is None or lowest["low"] <= part["min"], part
        assert lowest["high"] is None or part["min"] < lowest["high"], part
        assert highest["low"] is None or highest["low"] <= part["max"], part
        assert highest["high"] is None or part["max"] < highest["high"], part
        if all(bucket["low"] is not None and bucket["high"] is not None for bucket in hit):
            least = sum(bucket["low"] * bucket["count"] for bucket in hit)
            most = sum((bucket["high"] - 1) * bucket["count"] for bucket in hit)
            assert least <= part["sum"] <= most, part
