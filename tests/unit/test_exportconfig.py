"""The export CONFIG: a good file read into the model's Aggregations; each mistake named by its metric and key."""

from __future__ import annotations

import pytest

from kprobe_tui.aggregate.exportconfig import DEFAULT_MAX_SERIES, load, parse
from kprobe_tui.aggregate.model import Field, Linear, Log2
from kprobe_tui.errors import UserError

GOOD = """
max_series = 20

[[metric]]
name = "work_calls"
kind = "count"
binary = "/bin/true"
probe = ["work", "rest"]
by = ["comm", "ntohs(port)"]

[[metric]]
name = "work_len"
help = "len"
kind = "hist"
probe = "work"
value = "len"
linear = [0, 1000, 100]
max_series = 5

[[metric]]
name = "nap_seconds"
kind = "latency"
probe = "nap"
unit = "ns"
filter = "comm != \\"x\\""
"""


def test_a_good_config():
    calls, length, nap = parse(GOOD, "cfg").metrics
    assert calls.specs == ("work", "rest") and calls.binary == "/bin/true"
    assert calls.aggregation.keys == (Field("comm"), Field("port", "ntohs")) and calls.labels == ("comm", "port")
    assert calls.max_series == 20 and calls.help == "kprobe-tui count of work rest"
    assert length.aggregation.value == Field("len") and length.value == "len"
    assert length.aggregation.buckets == Linear(0, 1000, 100) and length.max_series == 5
    assert nap.aggregation.unit == "ns" and nap.aggregation.buckets == Log2() and nap.filter == 'comm != "x"'
    assert nap.aggregation.keys == ()


def test_defaults():
    [metric] = parse('[[metric]]\nname = "c"\nkind = "count"\nprobe = "work"\n', "cfg").metrics
    assert metric.aggregation.keys == (Field("probe"),) and metric.max_series == DEFAULT_MAX_SERIES
    assert metric.engine == "auto" and metric.binary is None


def metric(body: str) -> str:
    return f'[[metric]]\nname = "m"\n{body}\n'


@pytest.mark.parametrize("text, said", [
    ('[[metric]]\nname = "m"\nkind = \n', "cfg: not valid TOML: "),  # tomllib's line and column follow
    ("", "cfg: no [[metric]] tables"),
    ("metric = 3", "cfg: no [[metric]] tables"),
    ('colour = "red"\n' + metric('kind = "count"\nprobe = "w"'), "cfg: unknown key 'colour'"),
    ("max_series = 0\n" + metric('kind = "count"\nprobe = "w"'), "cfg: max_series = 0: must be a whole number"),
    ('[[metric]]\nname = "9lives"\nkind = "count"\nprobe = "w"\n', "cfg: metric #1: name = '9lives'"),
    ('[[metric]]\nname = "kprobe_tui_export_up"\nkind = "count"\nprobe = "w"\n', "names starting kprobe_tui_export_"),
    (metric('kind = "sum"\nprobe = "w"'), "cfg: metric 'm': kind = 'sum': not one of count, hist, latency"),
    (metric('kind = "count"\nprobe = "w"\nbuckets = 3'), "cfg: metric 'm': unknown key 'buckets'"),
    (metric('kind = "count"\nprobe = "w"\nvalue = "len"'), "cfg: metric 'm': value has no meaning for kind = 'count'"),
    (metric('kind = "count"\nprobe = []'), "cfg: metric 'm': probe = []: must be a SPEC"),
    (metric('kind = "hist"\nprobe = ["a", "b"]\nvalue = "len"'), "probe: a hist is of one probe, not 2"),
    (metric('kind = "hist"\nprobe = "w"'), "cfg: metric 'm': a hist needs value = FIELD"),
    (metric('kind = "hist"\nprobe = "w"\nvalue = "len"\nlinear = [0, 10]'), "linear = [0, 10]: must be [MIN, MAX, STEP]"),
    (metric('kind = "hist"\nprobe = "w"\nvalue = "len"\nlinear = [0, 10, 3]'), "MAX-MIN is not a multiple of STEP"),
    (metric('kind = "hist"\nprobe = "w"\nvalue = "len"\nby = ["le"]'), "by: le is a histogram's own label"),
    (metric('kind = "count"\nprobe = "w"\nby = ["port", "ntohs(port)"]'), "two keys would both be the label 'port'"),
    (metric('kind = "count"\nprobe = "w"\nby = ["nämlich"]'), "'nämlich' is not a Prometheus label name"),
    (metric('kind = "count"\nprobe = "w"\nby = "comm pid"'), "'comm pid': not a field name"),
    (metric('kind = "latency"\nprobe = "w"\nby = ["len"]'), "cfg: metric 'm': latency is keyed by comm, pid or stack"),
    (metric('kind = "latency"\nprobe = "w"\nby = ["stack"]'), "cfg: metric 'm': by: an exporter's metrics are not keyed by stack"),
    (metric('kind = "latency"\nprobe = "w"\nunit = "s"'), "cfg: metric 'm': unit = 's': not one of ns, us, ms"),
    (metric('kind = "count"\nprobe = "w"\nfilter = "len >"'), "cfg: metric 'm': "),
    (metric('kind = "count"\nprobe = "w"\nengine = "gpu"'), "engine = 'gpu': not one of auto, kernel, bpf, hist, user"),
    (metric('kind = "count"\nprobe = "w"\nbinary = 1'), "cfg: metric 'm': binary = 1: must be a string"),
    (metric('kind = "count"\nprobe = "w"') + '[[metric]]\nname = "m_total"\nkind = "count"\nprobe = "w"\n',
     "metrics 'm' and 'm_total' would both be exposed as 'm'"),
    (metric('kind = "hist"\nprobe = "w"\nvalue = "v"') + '[[metric]]\nname = "m_count"\nkind = "count"\nprobe = "w"\n',
     "would both be exposed as 'm_count'"),
])
def test_mistakes_are_named(text, said):
    with pytest.raises(UserError) as caught:
        parse(text, "cfg")
    assert said in caught.value.message


def test_a_syntax_error_keeps_its_line():
    with pytest.raises(UserError, match=r"at line 3, column"):
        parse('[[metric]]\nname = "m"\nkind = \n', "cfg")


def test_a_huge_value_is_shortened_in_the_message():
    with pytest.raises(UserError) as caught:
        parse(metric('kind = "' + "x" * 100_000 + '"\nprobe = "w"'), "cfg")
    assert len(caught.value.message) < 200


def test_the_file_is_read_as_a_regular_utf8_file(tmp_path):
    (tmp_path / "latin1.toml").write_bytes(b'# caf\xe9\n')
    with pytest.raises(UserError, match=r"not UTF-8 text \(byte 5\)"):
        load(tmp_path / "latin1.toml")
    with pytest.raises(UserError, match="a directory"):
        load(tmp_path)
