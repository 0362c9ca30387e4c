"""``kprobe-tui export --once`` with the kernel engines on a kprobe (hist triggers for one metric, our BPF
program for the other), inside a guest.

The workload (tests/live/c/aggregate.c ``read 25 3000``) makes exactly 25 vfs_reads of 3000 bytes as
comm kpt-reader: the page's counter and histogram say so, and ``kprobe-tui count`` run at the same
time on the same workload says the same. The exposition does not say which engine ran: stderr does.
The ``tracefs`` fixture checks that the exporter left nothing in the kernel.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.aggregate_cli import PROJECT, Aggregation, build, counts, run_workload

pytestmark = pytest.mark.kernel

READS, READ_SIZE = 25, 3000
CONFIG = """
[[metric]]
name = "vfs_reads"
kind = "count"
probe = "vfs_read"
by = ["comm"]
engine = "hist"

[[metric]]
name = "vfs_read_bytes"
kind = "hist"
probe = "vfs_read"
value = "count"
by = ["comm"]
engine = "kernel"
"""


def test_once_exports_the_kernel_engines_exact_counts_as_count_sees_them(tracefs, tmp_path):
    program = build(tmp_path / "kpt_aggregate_export")
    config = tmp_path / "export.toml"
    config.write_text(CONFIG)
    count = Aggregation("count", "vfs_read", "--by", "comm", "--engine", "kernel")
    count.ready()
    # Long enough for the guest's slow Python to compile both metrics and start them before the workload.
    exporter = subprocess.Popen([sys.executable, "-m", "kprobe_tui", "export", str(config), "--once", "--duration", "20"],
                                cwd=PROJECT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    said: list[str] = []
    while sum(" engine: " in line for line in said) < 2:
        line = exporter.stderr.readline()
        assert line, f"export exited {exporter.wait()} before its runs started: {said}"
        said.append(line.rstrip("\n"))
    run_workload(program, "read", str(READS), str(READ_SIZE))
    page, rest = exporter.communicate(timeout=300)
    said += rest.splitlines()
    assert exporter.returncode == 0, said
    assert any(line.startswith("kprobe-tui: export: vfs_reads: kernel engine: hist triggers") for line in said), said
    assert any(line.startswith("kprobe-tui: export: vfs_read_bytes: kernel engine: a BPF program") for line in said), said
    samples = {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
               for family in text_string_to_metric_families(page) for sample in family.samples}
    reader = (("comm", "kpt-reader"),)
    assert samples[("vfs_reads_total", reader)] == READS
    # 3000 bytes: log2 bucket [2048, 4096), le 4095; none at le 2047
    assert samples[("vfs_read_bytes_bucket", (*reader, ("le", "2047.0")))] == 0
    assert samples[("vfs_read_bytes_bucket", (*reader, ("le", "4095.0")))] == READS
    assert samples[("vfs_read_bytes_sum", reader)] == READS * READ_SIZE
    assert samples[("kprobe_tui_export_up", (("metric", "vfs_reads"),))] == 1
    record = count.final()
    assert record["engine"] == "kernel" and counts(record, "comm")["kpt-reader"] == READS
