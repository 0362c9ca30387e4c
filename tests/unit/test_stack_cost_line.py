"""The cost line names the probes as the user typed them: on a terminal it stays text (no escape sequence runs)."""

from __future__ import annotations

from types import SimpleNamespace

from kprobe_tui.aggregate.estimate import StackCost
from kprobe_tui.commands import stackcost


def test_a_spec_holding_an_escape_sequence_is_printed_escaped(monkeypatch, capsys):
    hostile = "leaf\x1b]0;owned\x07\x1b[2J"
    monkeypatch.setattr(stackcost, "estimate", lambda run, what: StackCost(what, 10.0, "kernel", 2e-6))
    stackcost.check_stack_cost(SimpleNamespace(yes=False), None, hostile)
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err and "leaf" in err and "10 hits/s" in err


def test_the_per_hit_figure_says_where_it_comes_from():
    """User space's was measured on a machine; the kernel's comes from an emulated guest, scaled: not "measured"."""
    assert StackCost("leaf", 100.0, "user", 37e-6).line().endswith("(measured 37 us a hit)")
    kernel = StackCost("vfs_read", 100.0, "kernel", 2e-6).line()
    assert kernel.endswith("(~2 us a hit, an emulated guest's figure scaled)") and "measured" not in kernel
