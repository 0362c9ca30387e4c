"""``kprobe-tui export CONFIG``: the answers of count, hist and latency runs, served to Prometheus.

CONFIG (TOML) lists the metrics; each is one aggregation run, made at the start and removed at
the end (SIGTERM, SIGHUP, SIGINT: kernel/lifetime.py; after a SIGKILL, `kprobe-tui cleanup`).
The whole file is checked and every probe compiled before anything is made in the kernel. At each
scrape, each run's cumulative answer (since the start) becomes a counter or a histogram
(aggregate/exposition.py); prometheus_client serves the page. ``--once`` prints one page and exits.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterable
from types import SimpleNamespace

from prometheus_client import CollectorRegistry, generate_latest, start_http_server

from kprobe_tui.aggregate import exportconfig
from kprobe_tui.aggregate.exportconfig import ExportConfig, MetricConfig
from kprobe_tui.aggregate.exposition import ExportCollector, ExportedMetric
from kprobe_tui.aggregate.result import Result
from kprobe_tui.aggregate.run import AggregationRun
from kprobe_tui.aggregate.targets import Targets
from kprobe_tui.commands.aggregation import builder
from kprobe_tui.commands.seconds import check_seconds
from kprobe_tui.errors import UserError
from kprobe_tui.probes.guard import NETWORK_PATH, on_output_path
from kprobe_tui.probes.spec import ProbeSpec

DEFAULT_LISTEN = "127.0.0.1:9435"  # 9435: free in Prometheus' list of default exporter ports
ONCE_SECONDS = 1.0


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "export", help="serve count/hist/latency aggregations to Prometheus, as CONFIG (TOML) lists them",
        description=exportconfig.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", metavar="CONFIG", help="the metrics, a TOML file (see above)")
    parser.add_argument("--listen", metavar="HOST:PORT", default=DEFAULT_LISTEN,
                        help=f"where to serve /metrics (default {DEFAULT_LISTEN}; port 0: any free port)")
    parser.add_argument("--once", action="store_true",
                        help="run the probes for --duration, print the page to stdout, remove everything, exit")
    parser.add_argument("-d", "--duration", type=float, metavar="SECONDS",
                        help=f"stop after SECONDS (default: --once {ONCE_SECONDS:g} s, else until a signal)")
    parser.set_defaults(run=run)


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``[IPV6]:PORT``."""
    host, colon, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not colon or not host or not port.isdigit() or int(port) > 65535:
        raise UserError(f"--listen {text}: expected HOST:PORT", f"e.g. --listen {DEFAULT_LISTEN} or --listen [::1]:9435")
    return host, int(port)


def _err(text: str) -> None:
    sys.stderr.write(f"kprobe-tui: export: {text}\n")
    sys.stderr.flush()


def _prefixed(config: ExportConfig, metric: MetricConfig, exc: UserError) -> UserError:
    return UserError(f"{config.path}: metric {metric.name!r}: {exc.message}", exc.hint)


def compile_all(args, config: ExportConfig):
    """Every metric's probes, compiled before any is made: a mistake in the last one leaves the kernel untouched."""
    top = None
    compiled: list[tuple[MetricConfig, Targets]] = []
    taken: list[str] = []  # event names compiled for earlier metrics (all are in this run's one group)
    for metric in config.metrics:
        try:
            top, build = builder(SimpleNamespace(**{**vars(args), "binary": metric.binary}))
            build.taken += taken
            aggregation = metric.aggregation
            if aggregation.kind == "count":
                targets = build.counting(list(metric.specs), aggregation, metric.filter)
            elif aggregation.kind == "hist":
                assert metric.value is not None, "the config gives a hist its value"
                targets = build.histogram(metric.specs[0], metric.value, aggregation, metric.filter)
            else:
                targets = build.latency(metric.specs[0], aggregation, metric.filter)
        except UserError as exc:
            raise _prefixed(config, metric, exc) from None
        taken = build.taken
        compiled.append((metric, targets))
    return top, compiled


def own_path_warning(metric: str, specs: Iterable[ProbeSpec]) -> str | None:
    """The golden rule (never cause, per traced event, an event you trace), said of one metric when it is broken.

    Serving a scrape sends the page over TCP and polls its socket: the feedback guard's network path
    (probes/guard.py; its terminal half, vfs_read and tty writes, is not the server's: sockets are read
    and written with recv and send). The runs leave out the
    threads the exporter has when they start, but prometheus_client answers each scrape in a thread
    of its own, started later, and the TCP stack's softirq work is done in whoever's name: such a
    metric counts the exporter's own answers too, more as it is scraped more often.
    """
    functions = sorted({spec.function for spec in specs
                        if spec.function and not spec.is_uprobe and on_output_path(spec.function, NETWORK_PATH)})
    if not functions:
        return None
    return (f"{metric}: {', '.join(functions)} {'is' if len(functions) == 1 else 'are'} on the exporter's own path "
            "(each scrape's answer is sent over TCP from a thread the probes' filter cannot leave out): "
            "its values include the exporter's own calls, more with each scrape")


def run(args) -> int:
    check_seconds(args, "duration")
    address = None if args.once else parse_listen(args.listen)
    config = exportconfig.load(args.config)
    top, compiled = compile_all(args, config)
    if address is not None:  # --once serves nothing: its one write of the page is no feedback
        for metric, targets in compiled:
            warning = own_path_warning(metric.name, (target.probe.spec for target in targets.items))
            if warning:
                _err(f"warning: {warning}")
    registry, server = CollectorRegistry(), None
    if address is not None:  # bound before the probes are made: a port in use leaves the kernel untouched
        try:
            server, _thread = start_http_server(address[1], address[0], registry=registry)
        except OSError as exc:
            raise UserError(f"--listen {args.listen}: {exc.strerror or exc}", "choose another HOST:PORT") from None
    runs: list[tuple[MetricConfig, AggregationRun]] = []
    try:
        for metric, targets in compiled:
            if targets.skipped:
                _err(f"{metric.name}: skipped " + "; ".join(f"{len(n)} {why}" for why, n in targets.skipped.items()))
            aggregation_run = AggregationRun(top, metric.aggregation, targets, metric.filter, metric.engine)
            try:
                choice = aggregation_run.start()
            except UserError as exc:
                raise _prefixed(config, metric, exc) from None
            runs.append((metric, aggregation_run))
            _err(f"{metric.name}: {choice.engine} engine: {choice.reason}")
        if args.once:
            time.sleep(args.duration or ONCE_SECONDS)
            finals = {metric.name: run.stop() for metric, run in runs}
            registry.register(ExportCollector([_exported(m, r, lambda name=m.name: _total(finals[name])) for m, r in runs]))
            sys.stdout.write(generate_latest(registry).decode("utf-8"))
            return 0
        registry.register(ExportCollector([_exported(m, r, _sampler(r)) for m, r in runs]))
        assert server is not None and address is not None, "a run that is not --once serves"
        host = f"[{address[0]}]" if ":" in address[0] else address[0]
        _serve(args.duration, f"serving {len(runs)} metric{'s' if len(runs) != 1 else ''} "
                              f"on http://{host}:{server.server_port}/metrics")
        return 0
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
        for _metric, aggregation_run in reversed(runs):
            aggregation_run.stop()


def _serve(duration: float | None, announcement: str) -> None:
    """Until --duration is over, or Ctrl-C (SIGTERM and SIGHUP end the run through lifetime's handlers).

    The announcement is made inside the try: a Ctrl-C sent as soon as it is read (as a script
    or a test does) is the same clean stop, not exit 130 (seen once in CI's 1,386 tests).
    """
    deadline = time.monotonic() + duration if duration else None
    try:
        _err(announcement)
        while deadline is None or time.monotonic() < deadline:
            time.sleep(3600 if deadline is None else max(0.0, deadline - time.monotonic()))
    except KeyboardInterrupt:
        pass


def _total(sample) -> Result | None:
    return sample.total if sample is not None else None


def _sampler(aggregation_run: AggregationRun):
    """The run's cumulative Result at scrape time; None once it cannot say (a reader failed, or it was stopped)."""
    def sample() -> Result | None:
        try:
            return aggregation_run.sample().total
        except (UserError, RuntimeError):
            return None

    return sample


def _exported(metric: MetricConfig, aggregation_run: AggregationRun, sample) -> ExportedMetric:
    return ExportedMetric(metric.name, metric.help, metric.aggregation.kind, metric.labels, metric.max_series,
                          sum(len(target.probes) for target in aggregation_run.targets.items), sample,
                          metric.aggregation.buckets, _divisor(metric))


def _divisor(metric: MetricConfig) -> int:
    """A latency's units per second (exposition.py: exposed in Prometheus' base unit); other values as they are."""
    return 1_000_000_000 // metric.aggregation.unit_ns if metric.aggregation.kind == "latency" else 1
