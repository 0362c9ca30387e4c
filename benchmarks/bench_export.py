"""What ``kprobe-tui export`` costs: building a page, and serving one a second during a uprobe flood.

1. A page of SERIES series (generate_latest over ExportCollector, from a cumulative Result as the
   engines make it): a count by (comm, pid) and a log2 histogram by (comm, pid). Beside it, the
   reference: prometheus_client's own Counter with the same number of labelled children, the least
   a page of that many series costs with this library. Best of a few rounds of this process's CPU;
   then the scrape as Prometheus sees it: an HTTP GET of each page served on 127.0.0.1, wall time.
2. A flood of uprobe hits (tests/live/c/aggregate.c ``flood``) counted by comm with an engine (--engine:
   user here, where there are no hist triggers; kernel or bpf in a guest),
   twice: as ``count -i 1`` runs it (a sample a second, no exporter), and as ``export`` runs it (served
   over HTTP on 127.0.0.1, a child scraping it once a second). Our process's CPU (user + system, all
   threads, getrusage) per million hits; the difference is the exporter's. It is a cost per scrape
   (one small page), not per hit: at a higher hit rate it is less per million. Needs root and uprobes.
Usage: python benchmarks/bench_export.py [--series N] [--calls N] [--no-live]
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from prometheus_client import CollectorRegistry, Counter, generate_latest, start_http_server  # noqa: E402

from kprobe_tui.aggregate.exposition import ExportCollector, ExportedMetric  # noqa: E402
from kprobe_tui.aggregate.model import Aggregation, Field  # noqa: E402
from kprobe_tui.aggregate.result import Result, summarize  # noqa: E402
from kprobe_tui.aggregate.tally import Tally  # noqa: E402

ROUNDS = 5
# A scraper in a child process, so its CPU is not ours: GET the page once a second until killed.
SCRAPER = ("import sys, time, urllib.request\n"
           "while True:\n"
           "    urllib.request.urlopen(sys.argv[1], timeout=10).read()\n"
           "    time.sleep(1.0)\n")


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def best_of(work) -> float:
    """The least CPU seconds of ROUNDS calls (the machine is shared: wall time measures the others)."""
    spent = []
    for _ in range(ROUNDS):
        before = cpu()
        work()
        spent.append(cpu() - before)
    return min(spent)


# -- 1. a page ----------------------------------------------------------------------------------------


def cumulative(aggregation: Aggregation, series: int) -> Result:
    """``series`` keys (comm, pid), each hit with a spread of values, summarized as the engines do."""
    tally = Tally()
    for n in range(series):
        key = (f"worker-{n % 97}", 1000 + n)
        if aggregation.kind == "count":
            tally.count(key, 1 + n % 50)
        else:
            tally.cell(key).add_values({1 << (n % 17): 1 + n % 5, n: 1})
    return summarize(aggregation, tally, "user", 0.0, 1.0)


def ours(aggregation: Aggregation, series: int) -> CollectorRegistry:
    """The exporter's page of ``series`` series of one metric."""
    answer = cumulative(aggregation, series)
    metric = ExportedMetric("m", "help", aggregation.kind, tuple(key.name for key in aggregation.keys), series, 1,
                            lambda: answer, aggregation.buckets)
    registry = CollectorRegistry()
    registry.register(ExportCollector([metric]))
    return registry


def reference(series: int) -> CollectorRegistry:
    """prometheus_client's own labelled Counter, ``series`` children."""
    registry = CollectorRegistry()
    counter = Counter("m", "help", ["comm", "pid"], registry=registry)
    for n in range(series):
        counter.labels(f"worker-{n % 97}", str(1000 + n)).inc(1 + n % 50)
    return registry


def scrape_seconds(registry: CollectorRegistry) -> float:
    """The least wall time of ROUNDS HTTP GETs of the page, served as export serves it, on loopback."""
    server, _thread = start_http_server(0, "127.0.0.1", registry=registry)
    url = f"http://127.0.0.1:{server.server_port}/metrics"
    try:
        times = []
        for _ in range(ROUNDS):
            started = time.perf_counter()
            urllib.request.urlopen(url, timeout=10).read()
            times.append(time.perf_counter() - started)
        return min(times)
    finally:
        server.shutdown()
        server.server_close()


def bench_page(series: int) -> None:
    print(f"1. one page of {series:,} series: generate_latest (best of {ROUNDS}, our CPU), and a scrape (HTTP GET on "
          "loopback, best wall time)")
    keys = (Field("comm"), Field("pid"))
    rows = [("count by comm, pid", ours(Aggregation("count", keys=keys), series)),
            ("log2 hist by comm, pid", ours(Aggregation("hist", keys=keys, value=Field("len")), series)),
            ("reference: a Counter", reference(series))]
    for name, registry in rows:
        built, size = best_of(lambda registry=registry: generate_latest(registry)), len(generate_latest(registry))
        print(f"   {name:<24} {built * 1000:7.1f} ms  {size / 1024:7.0f} KiB  scraped in {scrape_seconds(registry) * 1000:6.1f} ms")


# -- 2. a flood, served -------------------------------------------------------------------------------


def bench_flood(calls: int, engine: str) -> None:
    from kprobe_tui.aggregate.exportconfig import parse
    from kprobe_tui.aggregate.run import AggregationRun
    from kprobe_tui.aggregate.targets import TargetBuilder
    from kprobe_tui.commands.export import _exported, _sampler
    from kprobe_tui.kernel import lifetime
    from kprobe_tui.kernel.sources import locate

    kernel = locate()
    top = kernel.tracing()
    binary = Path(tempfile.mkdtemp(prefix="kpt-bench-")) / "kpt_aggregate_bench"
    subprocess.run(["gcc", "-g", "-O1", "-o", str(binary), str(ROOT / "tests/live/c/aggregate.c")], check=True)
    [metric] = parse(f'[[metric]]\nname = "work_calls"\nkind = "count"\nbinary = "{binary}"\nprobe = "work"\n'
                     f'by = ["comm"]\nengine = "{engine}"\n', "bench").metrics
    print(f"2. uprobe flood: work() called {calls:,} times, count by comm, --engine {engine}; our CPU (user + system, "
          "all threads) per million hits")
    per_million = {}
    for served in (False, True):
        builder = TargetBuilder(kernel, top.read("README"), lifetime.run_name(), binary=metric.binary)
        targets = builder.counting(list(metric.specs), metric.aggregation, metric.filter)
        run = AggregationRun(top, metric.aggregation, targets, metric.filter, metric.engine)
        server = scraper = None
        try:
            if served:  # as export.run serves: the collector samples the run at each scrape
                registry = CollectorRegistry()
                registry.register(ExportCollector([_exported(metric, run, _sampler(run))]))
                server, _thread = start_http_server(0, "127.0.0.1", registry=registry)
            run.start()
            if server is not None:
                scraper = subprocess.Popen([sys.executable, "-c", SCRAPER,
                                            f"http://127.0.0.1:{server.server_port}/metrics"])
            before, started = cpu(), time.perf_counter()
            flood = subprocess.Popen([str(binary), "flood", str(calls)], stdout=subprocess.DEVNULL)
            samples = 0
            while flood.poll() is None:
                time.sleep(1.0)
                if not served:  # as `count -i 1` samples
                    run.sample()
                    samples += 1
            final = run.stop()
            spent, wall = cpu() - before, time.perf_counter() - started
        finally:
            if scraper is not None:
                scraper.kill()
                scraper.wait()
            if server is not None:
                server.shutdown()
                server.server_close()
            run.stop()
        hits, lost = final.total.count, final.total.lost
        per_million[served] = spent / hits * 1e6 if hits else float("nan")
        how = "served, scraped 1/s" if served else f"no exporter, {samples} samples"
        print(f"   {how:<28} {hits:>10,} hits {lost:>7,} lost  CPU {spent:6.2f} s = {per_million[served]:6.3f} s "
              f"per 1M hits  ({hits / wall:>9,.0f} hits/s)")
    print(f"   the exporter's own: {per_million[True] - per_million[False]:+.3f} s per 1M hits")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--series", type=int, default=1000)
    parser.add_argument("--calls", type=int, default=300_000)  # ~10 s a run here (uprobe traps: ~35k hits/s)
    parser.add_argument("--no-live", action="store_true", help="leave out the flood (no root or no uprobes)")
    parser.add_argument("--engine", default="user", choices=("user", "kernel", "bpf", "hist"),
                        help="the flood's engine (kernel, bpf, hist: where the kernel has them, as in the guests)")
    args = parser.parse_args()
    bench_page(args.series)
    if not args.no_live:
        bench_flood(args.calls, args.engine)


if __name__ == "__main__":
    main()
