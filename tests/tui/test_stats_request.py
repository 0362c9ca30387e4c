"""The statistics view's question (no kernel): what a probe offers, how the choices cycle, the command
an administrator is handed in lab mode, and the linear scale derived from the values seen."""

from __future__ import annotations

import shlex

import pytest

from kprobe_tui.errors import UserError
from kprobe_tui.kernel.events import parse_definition
from kprobe_tui.tui.screens.stats import StatsRequest, nice_linear, probe_request


def test_a_probe_offers_its_captured_fields_and_its_function_latency():
    request = probe_request(parse_definition("p:grp/ev tcp_sendmsg+0 size=%dx:u64 sk=%di:x64", False))
    assert request.spec == ("tcp_sendmsg", "size=%dx:u64", "sk=%di:x64") and request.function == "tcp_sendmsg"
    assert request.keys_offered() == [None, "comm", "pid", "size", "sk", "stack"]
    assert request.values_offered() == ["count", "size", "sk", "latency"]
    ret = probe_request(parse_definition("r:grp/ev2 tcp_sendmsg ret=$retval:s32", False))
    assert ret.spec == ("tcp_sendmsg%return", "ret=$retval:s32") and ret.fields == ("ret",)


def test_kinds_the_view_cannot_take_are_refused_with_the_reason():
    with pytest.raises(UserError, match="the builder makes kprobes, uprobes and fprobes only"):
        probe_request(parse_definition("s:synthetic/lat u64 lat", False))


def test_choices_cycle_and_a_key_latency_cannot_have_falls_back_to_none():
    request = probe_request(parse_definition("p:grp/ev tcp_sendmsg size=%dx:u64", False))
    assert [request := request.cycled("key") for _ in range(5)][-1].key == "comm"  # comm pid size stack none comm
    keyed = StatsRequest(request.spec, fields=request.fields, function="tcp_sendmsg", key="size")
    latency = keyed.cycled("value").cycled("value")
    assert (latency.value, latency.key) == ("latency", None)
    assert latency.keys_offered() == [None, "comm", "pid", "stack"]  # the entry's stack, not a captured field


def test_the_histogram_word_is_the_probe_own_capture():
    request = StatsRequest(("work", "len=%di:s64", "port=%si:u16"), "/opt/my prog", ("len", "port"), "work",
                           key="port", value="len", linear=nice_linear(-200, 700))
    command = request.command()
    assert command == ["kprobe-tui", "hist", "-x", "/opt/my prog", "work port=%si:u16", "len=%di:s64",
                       "--by", "port", "--linear", "-200,800,100"]
    assert shlex.split(shlex.join(command)) == command
    aggregation = request.aggregation()
    assert (aggregation.kind, aggregation.value.name, [key.name for key in aggregation.keys]) == ("hist", "len", ["port"])


def test_glob_counts_per_probe_and_latency_commands():
    assert StatsRequest(("tcp_*",), key="probe").command() == ["kprobe-tui", "count", "tcp_*", "--by", "probe"]
    assert StatsRequest(("vfs_read",), function="vfs_read", key="comm", value="latency").command() == [
        "kprobe-tui", "latency", "vfs_read", "--by", "comm"]
    assert "latency" not in StatsRequest(("tcp_*",), function=None, key="probe").values_offered()


@pytest.mark.parametrize(("low", "high", "expected"), [
    (-200, 700, (-200, 800, 100)),  # aggregate.c's len: ten buckets of 100
    (0, 9, (0, 10, 1)),
    (3, 3, (3, 4, 1)),  # one value: one bucket
    (None, None, (0, 1, 1)),  # nothing seen yet
    (1, 2000, (0, 2200, 200)),
])
def test_a_linear_scale_over_the_values_seen_has_a_round_step(low, high, expected):
    linear = nice_linear(low, high)
    assert (linear.low, linear.high, linear.step) == expected
    assert low is None or (linear.index(low) >= 0 and linear.index(high) < linear.count)


async def test_the_view_and_its_keys_are_in_help_and_the_palette():
    """``a`` on the events screen is listed by ``?`` and offered by ctrl+p; the view has its own help."""
    from textual.command import CommandList

    from tests.tui.states import _replayed_stats, kernel_app, to_events, until
    from tests.tui.test_help import help_text

    app = kernel_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await to_events(pilot)
        await pilot.press("question_mark")
        assert "Stats" in help_text(app)
        await pilot.press("escape", "ctrl+p", *"stats")
        commands = app.screen.query_one(CommandList)
        await until(pilot, lambda: commands.option_count > 0, "the palette's search answered")
        assert any("Stats" in str(commands.get_option_at_index(i).prompt) for i in range(commands.option_count))
        await pilot.press("escape")
        await app.push_screen(_replayed_stats("latency"))
        await pilot.press("question_mark")
        assert "Statistics" in help_text(app) and "Log2/linear" in help_text(app)
