"""``kprobe-tui export`` on this machine's uprobes, scraped by a real Prometheus: the counters it stores are the
calls tests/live/c/aggregate.c makes, and nothing of the exporter is left in the kernel when it ends."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.openmetrics import parser as openmetrics_parser
from prometheus_client.parser import text_string_to_metric_families

from tests.aggregate_cli import PROJECT, Aggregation, build, run_workload

pytestmark = pytest.mark.live

PROMETHEUS = "/usr/bin/prometheus"


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    return build(tmp_path_factory.mktemp("export") / "kpt_aggregate_export")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def leftovers(root: Path, name: str) -> list[str]:
    """What the run named ``name`` (kptui_<pid>) left: its probes and its trace instances."""
    probes = [line for line in (root / "uprobe_events").read_text().splitlines() if f"{name}/" in line]
    return probes + [f"instance {n}" for n in os.listdir(root / "instances") if n == name or n.startswith(f"{name}__")]


def write_config(path: Path, program: Path, extra: str = "") -> Path:
    path.write_text(f"""
[[metric]]
name = "work_calls"
help = "calls of work() per comm"
kind = "count"
binary = "{program}"
probe = "work"
by = ["comm"]

[[metric]]
name = "work_len"
kind = "hist"
binary = "{program}"
probe = "work"
value = "len"
by = ["comm"]
{extra}""")
    return path


class Exporter:
    """``kprobe-tui export ARGS`` in a child; ``ready()`` once it serves (or, --once, once its probes run)."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "kprobe_tui", "export", *args], cwd=PROJECT,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.name = f"kptui_{self.proc.pid}"
        self.said: list[str] = []

    def wait_for(self, words: str, times: int = 1) -> None:
        while sum(words in line for line in self.said) < times:
            line = self.proc.stderr.readline()
            if not line:
                raise AssertionError(f"export exited {self.proc.wait()} before {words!r}: {self.said}")
            self.said.append(line.rstrip("\n"))

    def end(self, signum: int | None = signal.SIGTERM) -> tuple[str, str]:
        if signum is not None and self.proc.poll() is None:
            self.proc.send_signal(signum)
        out, err = self.proc.communicate(timeout=120)
        self.said += err.splitlines()
        return out, err


@pytest.fixture
def exporters(tracefs_root):
    """Every exporter of the test is ended, and has left nothing in the kernel."""
    started: list[Exporter] = []
    yield started
    for exporter in started:
        exporter.end()
        assert leftovers(tracefs_root, exporter.name) == [], exporter.said


def start(exporters: list[Exporter], *args: str) -> Exporter:
    exporter = Exporter(*args)
    exporters.append(exporter)
    return exporter


@pytest.fixture
def prometheus(tmp_path):
    """A real Prometheus; yields a function that points it at an exporter and returns its query function."""
    if not os.access(PROMETHEUS, os.X_OK):
        pytest.skip("Debian's prometheus is not installed")
    servers: list[subprocess.Popen] = []

    def serve(target: str):
        port = free_port()
        config = tmp_path / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n"
                          f"  - job_name: kprobe-tui\n    static_configs:\n      - targets: ['{target}']\n")
        servers.append(subprocess.Popen([PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                         f"--web.listen-address=127.0.0.1:{port}"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

        def query(promql: str) -> list[dict]:
            url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
            with urllib.request.urlopen(url, timeout=10) as answer:
                return json.load(answer)["data"]["result"]

        return query

    yield serve
    for server in servers:
        server.terminate()
        server.wait(timeout=60)


def eventually(query, promql: str, label: str, expected: dict, limit: float = 120) -> dict:
    """Query until the answer per ``label`` is ``expected`` (Prometheus scrapes once a second)."""
    deadline, got = time.monotonic() + limit, None
    while time.monotonic() < deadline:
        try:
            got = {series["metric"].get(label): float(series["value"][1]) for series in query(promql)}
        except OSError:
            got = "not up yet"
        if got == expected:
            return got
        time.sleep(0.5)
    raise AssertionError(f"{promql}: {got}, expected {expected}")


def cumulative_buckets(record: dict) -> dict[tuple[str, float], float]:
    """(comm, le) -> hits, from ``kprobe-tui hist --by comm --json``'s [low, high) buckets: le is high - 1."""
    got = {}
    for entry in record["entries"]:
        below = 0
        for bucket in entry["buckets"]:
            below += bucket["count"]
            got[entry["key"]["comm"], float("inf") if bucket["high"] is None else float(bucket["high"] - 1)] = below
        got[entry["key"]["comm"], float("inf")] = entry["count"]
    return got


def test_prometheus_stores_the_calls_per_comm_and_sigterm_leaves_nothing(program, exporters, prometheus, tmp_path,
                                                                         tracefs_root):
    port = free_port()
    exporter = start(exporters, str(write_config(tmp_path / "export.toml", program)), "--listen", f"127.0.0.1:{port}")
    exporter.wait_for("serving 2 metrics")
    assert len(leftovers(tracefs_root, exporter.name)) >= 2  # the probes are in the kernel while it serves
    # the user-space engine on the same run: its buckets are what Prometheus must store
    reference = Aggregation("hist", "-x", str(program), "work", "len", "--by", "comm", "--engine", "user")
    try:
        reference.ready()
        query = prometheus(f"127.0.0.1:{port}")
        eventually(query, 'kprobe_tui_export_up{job="kprobe-tui"}', "metric", {"work_calls": 1.0, "work_len": 1.0})
        for _ in range(2):  # two processes, each 50 calls as kpt-alpha, then 50 as "kpt beta-2"
            run_workload(program, "values", "100")
        eventually(query, "work_calls_total", "comm", {"kpt-alpha": 100.0, "kpt beta-2": 100.0})
        # len is -200..700, 10 calls each per 100: 20 of 100 below 0, 30 at most 63 ([0] and the negatives)
        eventually(query, 'work_len_bucket{le="-1.0"}', "comm", {"kpt-alpha": 20.0, "kpt beta-2": 20.0})
        eventually(query, 'work_len_bucket{le="+Inf"}', "comm", {"kpt-alpha": 100.0, "kpt beta-2": 100.0})
    finally:
        final = reference.final()  # ended whatever happened: its probes leave with it
    expected = cumulative_buckets(final)
    stored = {(series["metric"]["comm"], float(series["metric"]["le"])): float(series["value"][1])
              for series in query("work_len_bucket")}
    assert stored == expected
    exporter.end(signal.SIGTERM)
    assert exporter.proc.returncode == -signal.SIGTERM
    assert leftovers(tracefs_root, exporter.name) == []


@pytest.mark.parametrize("signum, status", [(signal.SIGINT, 0), (signal.SIGHUP, -signal.SIGHUP)])
def test_sigint_and_sighup_remove_everything(program, exporters, tmp_path, tracefs_root, signum, status):
    exporter = start(exporters, str(write_config(tmp_path / "export.toml", program)), "--listen", f"127.0.0.1:{free_port()}")
    exporter.wait_for("serving 2 metrics")
    exporter.end(signum)
    assert exporter.proc.returncode == status, exporter.said
    assert leftovers(tracefs_root, exporter.name) == []


def test_cleanup_mends_a_sigkill(program, exporters, tmp_path, tracefs_root):
    exporter = start(exporters, str(write_config(tmp_path / "export.toml", program)), "--listen", f"127.0.0.1:{free_port()}")
    exporter.wait_for("serving 2 metrics")
    exporter.end(signal.SIGKILL)
    assert leftovers(tracefs_root, exporter.name) != []
    subprocess.run([sys.executable, "-m", "kprobe_tui", "cleanup"], cwd=PROJECT, check=True, capture_output=True)
    assert leftovers(tracefs_root, exporter.name) == []


def test_once_prints_a_page_promtool_passes(program, exporters, tmp_path, tracefs_root):
    if shutil.which("promtool") is None:
        pytest.skip("promtool is not installed (Debian: prometheus)")
    exporter = start(exporters, str(write_config(tmp_path / "export.toml", program)), "--once", "--duration", "3")
    exporter.wait_for(" engine: ", times=2)
    run_workload(program, "values", "100")
    out, _ = exporter.end(signum=None)
    assert exporter.proc.returncode == 0, exporter.said
    assert 'work_calls_total{comm="kpt-alpha"} 50.0' in out and 'work_calls_total{comm="kpt beta-2"} 50.0' in out
    assert "# HELP work_calls_total calls of work() per comm\n# TYPE work_calls_total counter\n" in out  # the CONFIG's
    assert "# TYPE work_len histogram\n" in out
    checked = subprocess.run(["promtool", "check", "metrics"], input=out, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert leftovers(tracefs_root, exporter.name) == []


def test_a_return_value_is_a_label(program, exporters, tmp_path, tracefs_root):
    """work() returns len + port: (i % 10) * 100 - 200 plus 0x3500 for even i, 0x5000 for odd i, 10 calls each."""
    config = tmp_path / "export.toml"
    config.write_text(f'[[metric]]\nname = "work_returns"\nkind = "count"\nbinary = "{program}"\n'
                      'probe = "work%return $retval"\nby = ["retval"]\n')
    exporter = start(exporters, str(config), "--once", "--duration", "3")
    exporter.wait_for(" engine: ")
    run_workload(program, "values", "100")
    out, _ = exporter.end(signum=None)
    assert exporter.proc.returncode == 0, exporter.said
    [family] = [family for family in text_string_to_metric_families(out) if family.name == "work_returns"]
    returns = {(i % 10) * 100 - 200 + (0x5000 if i % 2 else 0x3500) for i in range(100)}
    assert {sample.labels["retval"]: sample.value for sample in family.samples} == {str(r): 10.0 for r in returns}


def scrape(port: int, accept: str) -> tuple[str, str]:
    """GET /metrics asking for one format: the content type served and the page."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers={"Accept": accept})
    with urllib.request.urlopen(request, timeout=10) as answer:
        return answer.headers["Content-Type"], answer.read().decode("utf-8")


def sample_values(family) -> dict[tuple, float]:
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value for sample in family.samples}


def test_the_page_is_served_as_prometheus_text_and_as_openmetrics(program, exporters, tmp_path):
    """Prometheus asks for OpenMetrics first, older scrapers and curl get the text format: the same samples."""
    port = free_port()
    exporter = start(exporters, str(write_config(tmp_path / "export.toml", program)), "--listen", f"127.0.0.1:{port}")
    exporter.wait_for("serving 2 metrics")
    run_workload(program, "values", "100")
    deadline, text = time.monotonic() + 60, ""
    while 'work_len_bucket{comm="kpt beta-2",le="+Inf"} 50.0' not in text:  # every hit read: the pages stay alike
        assert time.monotonic() < deadline, text
        kind, text = scrape(port, "text/plain;version=0.0.4")
        time.sleep(0.2)
    assert kind.startswith("text/plain; version=0.0.4"), kind
    kind, page_in_openmetrics = scrape(port, "application/openmetrics-text;version=1.0.0")
    assert kind.startswith("application/openmetrics-text; version=1.0.0"), kind
    families = {family.name: family for family in text_string_to_metric_families(text)}
    strict = {family.name: family for family in openmetrics_parser.text_string_to_metric_families(page_in_openmetrics)}
    for name in ("work_calls", "work_len"):
        assert families[name].type == strict[name].type
        assert sample_values(families[name]) == sample_values(strict[name]) != {}
    if shutil.which("promtool"):
        checked = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
        assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.parametrize("extra, said", [
    ('[[metric]]\nname = "gone"\nkind = "count"\nbinary = "{program}"\nprobe = "no_such_function"\n',
     "export.toml: metric 'gone': 'no_such_function': no such function"),
    ('[[metric]]\nname = "broken"\nkind = \n', "not valid TOML: "),
])
def test_a_bad_config_leaves_nothing_in_the_kernel(program, exporters, tmp_path, tracefs_root, extra, said):
    """The first two metrics are good: the third's mistake is found before any probe is made."""
    config = write_config(tmp_path / "export.toml", program, extra.format(program=program))
    exporter = start(exporters, str(config), "--listen", f"127.0.0.1:{free_port()}")
    _, err = exporter.end(signum=None)
    assert exporter.proc.returncode == 2 and said in err and "internal error" not in err, err
    assert leftovers(tracefs_root, exporter.name) == []


def test_a_port_in_use_leaves_nothing_in_the_kernel(program, exporters, tmp_path, tracefs_root):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        exporter = start(exporters, str(write_config(tmp_path / "export.toml", program)), "--listen", f"127.0.0.1:{port}")
        _, err = exporter.end(signum=None)
    assert exporter.proc.returncode == 2 and f"--listen 127.0.0.1:{port}: " in err, err
    assert leftovers(tracefs_root, exporter.name) == []
