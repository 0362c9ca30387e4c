"""SPECs and globs to probes, the names a run's objects carry, and output that stays data."""

from __future__ import annotations

import os
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from kprobe_tui.aggregate.model import Aggregation, Field
from kprobe_tui.aggregate.targets import COMM_ARGUMENT, RETURN_MAXACTIVE, TargetBuilder, filter_arguments
from kprobe_tui.errors import UserError
from kprobe_tui.kernel import lifetime
from kprobe_tui.kernel.events import OTHERS, STALE, THIS_RUN, instance_run, parse_definition
from kprobe_tui.kernel.sources import KernelSources
from kprobe_tui.kernel.triggers import scoped_name, scoped_run
from kprobe_tui.textsafe import printable
from tests.aggregate_cli import SOURCE

GROUP = "kptui_1"


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    out = tmp_path_factory.mktemp("targets") / "kpt_aggregate_targets"
    subprocess.run(["gcc", "-g", "-O1", "-o", str(out), str(SOURCE)], check=True)
    return out


def builder(program, **options) -> TargetBuilder:
    sources = KernelSources(None, None, Path(os.devnull), Path(os.devnull))
    return TargetBuilder(sources, "", GROUP, binary=str(program), **options)


def test_a_glob_of_a_programs_functions_says_what_it_left_out(program):
    targets = builder(program).counting(["n*", "work"], Aggregation("count", keys=(Field("probe"),)), "")
    assert [(t.label, t.event, t.role) for t in targets.items] == [("nap", "nap", "hit"), ("work", "work", "hit")]
    assert targets.globbed and targets.skipped == {"not probeable": ["nanosleep"]}  # imported from libc


def test_a_glob_past_max_probes_is_refused_with_the_count(program):
    with pytest.raises(UserError) as refused:
        builder(program, max_probes=2).counting(["*"], Aggregation("count"), "")
    assert "more than --max-probes 2" in refused.value.message and "--max-probes" in refused.value.hint


def test_arguments_are_captured_once_and_named_as_the_kernel_will(program):
    model = Aggregation("count", keys=(Field("comm"), Field("port", "ntohs")))
    targets = builder(program).counting(["work len"], model, "len > 3 && ntohs(port) == 53 && comm != \"x\"")
    [target] = targets.items
    assert [arg.name for arg in target.probe.args] == ["len", "port", COMM_ARGUMENT]
    assert target.probe.args[-1].fetch == "$comm"
    assert targets.arguments == {"len": "len", "port": "port", "comm": COMM_ARGUMENT}
    with pytest.raises(UserError, match="a glob counts calls"):
        builder(program).counting(["w*"], Aggregation("count", keys=(Field("len"),)), "")


def test_only_what_the_run_reads_is_captured(program):
    """Arguments the SPEC names but the run does not read are dropped; a histogram's value is kept."""
    spec = "work len=%di:s64 port=%si:u16"
    [count] = builder(program).counting([spec], Aggregation("count", keys=(Field("comm"),)), "").items
    assert [arg.name for arg in count.probe.args] == [COMM_ARGUMENT]
    [by_port] = builder(program).counting([spec], Aggregation("count", keys=(Field("port"),)), "").items
    assert by_port.probe.definition().endswith(" port=%si:u16")
    [hist] = builder(program).histogram("work port=%si:u16", "len=%di:s64",
                                        Aggregation("hist", keys=(Field("comm"),), value=Field("len")), "").items
    assert [arg.name for arg in hist.probe.args] == ["len", COMM_ARGUMENT]
    [filtered] = builder(program).counting([spec], Aggregation("count"), "port == 53").items
    assert [arg.name for arg in filtered.probe.args] == ["port"]


def test_names_taken_in_the_group_are_not_reused(program):
    """The same name twice would append a probe to the first event (the kernel allows several per event)."""
    targets = builder(program, taken=["work", "nap"]).latency("nap", Aggregation("latency"), "")
    assert [t.event for t in targets.items] == ["nap_1", "nap__return"]


def test_latency_probes_by_comm_and_kernel_kretprobe_slots(program):
    targets = builder(program).latency("nap", Aggregation("latency", keys=(Field("comm"),)), "")
    entry, ret = targets.items
    assert (entry.role, ret.role) == ("entry", "return")
    assert ret.probe.definition().startswith("r:kptui_1/nap__return ")  # uprobes have no maxactive
    assert not entry.probe.args and [arg.name for arg in ret.probe.args] == [COMM_ARGUMENT]  # read at the return
    kretprobe = replace(ret.probe, maxactive=RETURN_MAXACTIVE, spec=replace(ret.probe.spec, binary=None))
    assert kretprobe.definition().startswith(f"r{RETURN_MAXACTIVE}:kptui_1/nap__return ")
    for bad in ("n*", "nap%return", "nap 1"):
        with pytest.raises(UserError, match="latency is of one function"):
            builder(program).latency(bad, Aggregation("latency"), "")


def test_filter_arguments_are_the_non_header_fields():
    assert filter_arguments('comm == "x" && (ntohs(dport) == 53 || !(len > 3)) && pid != 1') == ["dport", "len"]
    assert filter_arguments("") == []


def test_a_runs_scoped_names_and_whose_they_are():
    ours = lifetime.run_name()
    assert scoped_name("lat1") == f"{ours}__lat1" and scoped_run(f"{ours}__agg2") == ours
    assert scoped_run("lat1") is None and scoped_run("other__x") is None
    assert instance_run(ours) == ours and instance_run(f"{ours}__agg1") == ours and instance_run("perf") is None
    dead = 2**22 + 12345  # beyond pid_max: never a live process
    for run, owner in ((ours, THIS_RUN), (f"kptui_{dead}", STALE)):
        event = parse_definition(f"s:synthetic/{run}__lat1\tu64 lat; u64 lat1; u64 nlat", None)
        assert (event.group, event.event, event.owner) == ("synthetic", f"{run}__lat1", owner)
    assert parse_definition("s:synthetic/wakeup_latency\tu64 lat", None).owner == OTHERS


def test_text_from_the_traced_system_is_printed_as_data():
    assert printable("cat") == "cat" and printable("evil\x1b[2J\n") == "evil\\x1b[2J\\n"
    assert printable("ünï") == "ünï"
