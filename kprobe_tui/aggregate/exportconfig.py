"""The CONFIG of ``kprobe-tui export``: TOML, a list of metrics, read and checked whole before anything is made.

Each ``[[metric]]`` is what one ``count``, ``hist`` or ``latency`` command line says, as keys::

    max_series = 100                      # optional: the default of every metric's max_series

    [[metric]]
    name = "work_calls"                   # a Prometheus metric name (a counter gets _total)
    help = "calls of work() per comm"     # optional
    kind = "count"                        # count, hist or latency
    binary = "/usr/local/bin/prog"        # optional: -x BINARY (uprobes)
    probe = "work"                        # a SPEC (count: a list of SPECs or a glob too)
    by = ["comm"]                         # the keys that become labels: comm, pid, probe, a captured field
    filter = "len >= 0"                   # optional: --filter
    max_series = 50                       # optional: series shown; the rest are summed into one "other"

``hist`` takes ``value`` (the FIELD) and ``linear = [MIN, MAX, STEP]`` (default log2 buckets);
``latency`` takes ``unit`` (ns, us, ms) and ``linear`` too; ``engine`` is auto, kernel or user.
Every mistake is found here or when the probes are compiled, before the kernel is touched, and is
named by the metric and key it is in; a TOML syntax error keeps tomllib's line and column.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from kprobe_tui.aggregate.model import KINDS, STACK_KEY, UNITS, Aggregation, Field, Linear, parse_field
from kprobe_tui.aggregate.offer import ENGINES
from kprobe_tui.aggregate.targets import argument_name
from kprobe_tui.errors import UserError
from kprobe_tui.files import MiB, read_regular
from kprobe_tui.probes.spec import parse_arg
from kprobe_tui.stream import filterexpr

# A config is a few dozen lines; a larger file is not one (and is not read whole into memory).
MAX_CONFIG_BYTES = MiB
# Series per metric before the rest are folded into one "other" series: each distinct comm or pid a
# traced process makes up is a series Prometheus keeps for weeks.
DEFAULT_MAX_SERIES = 100
# The exporter's own metrics (health, folded series) are named so; a metric of the config may not be.
RESERVED_PREFIX = "kprobe_tui_export_"
HINT = "see `kprobe-tui export --help` for the CONFIG format"
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_TOP_KEYS = ("max_series", "metric")
_KEYS = {  # key -> the kinds that take it
    "name": KINDS, "help": KINDS, "kind": KINDS, "probe": KINDS, "binary": KINDS, "by": KINDS, "filter": KINDS,
    "engine": KINDS, "max_series": KINDS, "value": ("hist",), "linear": ("hist", "latency"), "unit": ("latency",),
}


@dataclass(frozen=True)
class MetricConfig:
    """One metric: the aggregation it exposes and the command-line pieces its probes are compiled from."""

    name: str
    help: str
    aggregation: Aggregation
    specs: tuple[str, ...]  # count: one or more SPECs; hist and latency: one
    value: str | None  # hist: the FIELD, as `kprobe-tui hist` takes it
    binary: str | None
    filter: str
    engine: str
    max_series: int

    @property
    def labels(self) -> tuple[str, ...]:
        """The label names, in the order of the keys (a byte-swapped field is labelled by its name)."""
        return tuple(key.name for key in self.aggregation.keys)

    @property
    def exposed_names(self) -> tuple[str, ...]:
        """The names the exposition uses for it: two metrics sharing one would make an invalid page."""
        if self.aggregation.kind == "count":
            base = self.name.removesuffix("_total")
            return base, f"{base}_total"
        return self.name, f"{self.name}_bucket", f"{self.name}_sum", f"{self.name}_count"


@dataclass(frozen=True)
class ExportConfig:
    path: str
    metrics: tuple[MetricConfig, ...]


def load(path: str | Path) -> ExportConfig:
    """Read and check the CONFIG file (a regular file, UTF-8, at most MAX_CONFIG_BYTES)."""
    data = read_regular(path, "export CONFIG", MAX_CONFIG_BYTES)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text (byte {exc.start})", "a TOML file is UTF-8") from None
    return parse(text, str(path))


def parse(text: str, where: str) -> ExportConfig:
    """The metrics of a CONFIG's text; ``where`` names it in messages."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{where}: not valid TOML: {exc}", HINT) from None
    except (ValueError, RecursionError) as exc:  # an integer of over 4300 digits; arrays nested 100k deep
        raise UserError(f"{where}: not a CONFIG kprobe-tui can read: {exc or type(exc).__name__}", HINT) from None
    for key in document:
        if key not in _TOP_KEYS:
            raise UserError(f"{where}: unknown key {_shown(key)}", f"the top level has {', '.join(_TOP_KEYS)}; {HINT}")
    default_series = _max_series(document.get("max_series", DEFAULT_MAX_SERIES), where)
    tables = document.get("metric")
    if not isinstance(tables, list) or not tables or not all(isinstance(table, dict) for table in tables):
        raise UserError(f"{where}: no [[metric]] tables", f"each metric is a [[metric]] table; {HINT}")
    metrics: list[MetricConfig] = []
    for number, table in enumerate(tables, 1):
        metric = _metric(table, where, number, default_series)
        for other in metrics:
            shared = set(metric.exposed_names) & set(other.exposed_names)
            if shared:
                raise UserError(f"{where}: metrics {other.name!r} and {metric.name!r} would both be exposed as "
                                f"{min(shared)!r}", "give each metric a name of its own")
        metrics.append(metric)
    return ExportConfig(where, tuple(metrics))


def _shown(value: object, limit: int = 60) -> str:
    """A value of the file in a message: a hostile file may hold a megabyte on one line."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _max_series(value: object, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise UserError(f"{where}: max_series = {_shown(value)}: must be a whole number of at least 1",
                        "e.g. max_series = 100")
    return value


def _metric(table: dict, path: str, number: int, default_series: int) -> MetricConfig:
    """The ``number``th [[metric]] table; messages name it by its name once that is known to be one."""
    name = table.get("name")
    if not isinstance(name, str) or not _METRIC_NAME.fullmatch(name):
        raise UserError(f"{path}: metric #{number}: name = {_shown(name)}: not a Prometheus metric name",
                        "letters, digits, _ and :, not starting with a digit, e.g. name = \"work_calls\"")
    where = f"{path}: metric {name!r}"
    if name.startswith(RESERVED_PREFIX):
        raise UserError(f"{where}: names starting {RESERVED_PREFIX} are the exporter's own", "choose another name")
    kind = table.get("kind")
    if kind not in KINDS:
        raise UserError(f"{where}: kind = {_shown(kind)}: not one of {', '.join(KINDS)}", "e.g. kind = \"count\"")
    for key in table:
        if key not in _KEYS:
            raise UserError(f"{where}: unknown key {_shown(key)}", HINT)
        if kind not in _KEYS[key]:
            raise UserError(f"{where}: {key} has no meaning for kind = {kind!r}",
                            f"{key} is for {' and '.join(_KEYS[key])}")
    specs = _specs(table.get("probe"), kind, where)
    binary = _text(table, "binary", where, None)
    filter_text = _text(table, "filter", where, "") or ""
    value = _text(table, "value", where, None)
    unit = _text(table, "unit", where, "us") or "us"
    try:
        if filter_text:
            filterexpr.parse(filter_text)
        aggregation = _aggregation(table, kind, value, unit)
    except UserError as exc:
        raise UserError(f"{where}: {exc.message}", exc.hint) from None
    engine = _text(table, "engine", where, "auto")
    if engine not in ENGINES:
        raise UserError(f"{where}: engine = {_shown(engine)}: not one of {', '.join(ENGINES)}")
    help_text = _text(table, "help", where, None) or f"kprobe-tui {kind} of {' '.join(specs)}"
    max_series = _max_series(table.get("max_series", default_series), where)
    return MetricConfig(name, help_text, aggregation, specs, value, binary, filter_text, str(engine), max_series)


def _text(table: dict, key: str, where: str, default: str | None) -> str | None:
    value = table.get(key, default)
    if value is not None and not isinstance(value, str):
        raise UserError(f"{where}: {key} = {_shown(value)}: must be a string", f"quote it: {key} = \"...\"")
    return value


def _specs(value: object, kind: str, where: str) -> tuple[str, ...]:
    specs = [value] if isinstance(value, str) else value
    if not isinstance(specs, list) or not specs or not all(isinstance(spec, str) and spec.strip() for spec in specs):
        raise UserError(f"{where}: probe = {_shown(value)}: must be a SPEC or a list of SPECs",
                        "as `kprobe-tui probe` takes it, e.g. probe = \"work len\" or probe = [\"vfs_read\", \"vfs_write\"]")
    if kind != "count" and len(specs) != 1:
        raise UserError(f"{where}: probe: a {kind} is of one probe, not {len(specs)}", "give one SPEC")
    return tuple(specs)


def _keys(value: object, kind: str) -> tuple[Field, ...]:
    """``by``: the labels. The default of a count is the probe, as `kprobe-tui count` has it."""
    if value is None:
        return (Field("probe"),) if kind == "count" else ()
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, list) or not all(isinstance(text, str) for text in texts):
        raise UserError(f"by = {_shown(value)}: must be a list of keys", "e.g. by = [\"comm\", \"pid\"]")
    keys = tuple(parse_field(text, "label") for text in texts)
    names = [key.name for key in keys]
    for key in keys:
        if not _LABEL_NAME.fullmatch(key.name) or key.name.startswith("__"):
            raise UserError(f"by: {_shown(key.name)} is not a Prometheus label name", "ASCII letters, digits and _")
        if key.name == STACK_KEY:  # a label value a call path: series without bound, and no engine of the exporter's
            raise UserError("by: an exporter's metrics are not keyed by stack (each call path would be a series)",
                            "key by comm, pid, probe or a field; count by stack with: kprobe-tui count SPEC --by stack")
        if key.name == "le" and kind != "count":
            raise UserError("by: le is a histogram's own label", "capture the field under another name: NAME=le")
        if names.count(key.name) > 1:
            raise UserError(f"by: two keys would both be the label {key.name!r}", "key by each field once")
    return keys


def _aggregation(table: dict, kind: str, value_text: str | None, unit: str) -> Aggregation:
    """The model's Aggregation, which checks what it can (its messages get the metric's name put before them)."""
    keys = _keys(table.get("by"), kind)
    value = None
    if kind == "hist":
        if not value_text:
            raise UserError("a hist needs value = FIELD", "e.g. value = \"len\"")
        value = Field(argument_name(parse_arg(value_text)))
    buckets = None
    if "linear" in table:
        bounds = table["linear"]
        if (not isinstance(bounds, list) or len(bounds) != 3
                or not all(isinstance(n, int) and not isinstance(n, bool) for n in bounds)):
            raise UserError(f"linear = {_shown(bounds)}: must be [MIN, MAX, STEP], three integers",
                            "e.g. linear = [0, 1000, 100]")
        buckets = Linear(*bounds)
    if unit not in UNITS:
        raise UserError(f"unit = {_shown(unit)}: not one of {', '.join(UNITS)}")
    return Aggregation(kind, keys=keys, value=value, buckets=buckets, unit=unit)
