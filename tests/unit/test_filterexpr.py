"""The filter language: parsing with positioned errors, evaluation, push-down to kernel syntax."""

from __future__ import annotations

import pytest

from kprobe_tui.stream.filterexpr import BoolOp, Compare, FilterError, Not, compile_filter, field_kinds, parse, push_down
from kprobe_tui.stream.parser import LineParser
from tests.conftest import FIXTURES

_parser = LineParser()
EVENTS = _parser.feed((FIXTURES / "trace_lines" / "uprobe_plain.txt").read_text().splitlines()) + _parser.flush()
EV_FORMAT = """name: ev
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:unsigned long __probe_ip;\toffset:8;\tsize:8;\tsigned:0;
\tfield:s64 n;\toffset:16;\tsize:8;\tsigned:1;
\tfield:u64 nx;\toffset:24;\tsize:8;\tsigned:0;
\tfield:__data_loc char[] s;\toffset:32;\tsize:4;\tsigned:1;
\tfield:u8 c;\toffset:36;\tsize:1;\tsigned:0;
\tfield:s32 arr[];\toffset:37;\tsize:16;\tsigned:1;

print fmt: "(%lx) n=%Ld nx=0x%Lx s=\\"%s\\" c='%c' arr={%d,%d,%d,%d}", REC->__probe_ip, REC->n, REC->nx, __get_str(s), REC->c, REC->arr[0], REC->arr[1], REC->arr[2], REC->arr[3]
"""  # noqa: E501  the format file of the captured ``ev``, verbatim (tests/fixtures/trace_lines/README.md)


def matching(text: str) -> list[tuple[str, int]]:
    predicate = compile_filter(parse(text))
    return [(e.event, e.args.get("n")) for e in EVENTS if predicate(e)]


def test_precedence_and_parentheses():
    tree = parse('comm == "sshd" && len > 100 || event ~ "tcp_*"')
    assert tree == BoolOp("||", BoolOp("&&", Compare("comm", "==", "sshd", 0), Compare("len", ">", 100, 18)),
                          Compare("event", "~", "tcp_*", 31))
    assert parse("!(a == 1 || b != -0x2)") == Not(BoolOp("||", Compare("a", "==", 1, 2), Compare("b", "!=", -2, 12)))


@pytest.mark.parametrize("text, column, words", [
    ("comm ==", 8, "expected a number or a quoted string, found end"),
    ('comm = "x"', 6, "unexpected '='"),
    ("comm == sshd", 9, 'quote the string: "sshd"'),
    ("(n == 1", 8, "expected )"),
    ("n == 1 pid", 8, "expected && or ||"),
    ("n ~ 3", 5, "glob"),
    ('n == 1 && && pid == 2', 11, "expected a field name"),
    ("", 1, "empty filter"),
    ('comm == "x', 9, "unexpected '\"'"),
])
def test_errors_point_at_the_offending_column(text, column, words):
    with pytest.raises(FilterError) as caught:
        parse(text)
    assert caught.value.position + 1 == column and words in caught.value.problem
    assert f"column {column}" in str(caught.value) and str(caught.value).splitlines()[2].index("^") == column + 1


def test_evaluation_on_captured_events():
    assert matching("n > 100") == [("ev", 101)]
    assert matching('event == "ret" && rv >= 292') == [("ret", None)]
    assert matching('comm ~ "a-b*" && event ~ "b*"') == [("bare", None), ("bare", None)]
    assert matching('s == "quote \\"q\\" \\\\ end" && n == 100') == [("ev", 100)]
    assert matching('nx == 0x65') == [("ev", 101)]
    assert matching('c == "Z" && pid == 8189 && cpu == 1 && time > 289.1085') == [("ev", 101)]
    assert matching("nosuchfield == 1 || n == 100") == [("ev", 100)]  # a missing field compares false
    assert len(matching("!(n != 100)")) == 5  # ... also under "!": every event without n, and n=100
    assert matching('n == "100"') == [("ev", 100)]  # strings compare with the printed value
    assert matching("bad == 0") == []  # (fault) is not a number


def test_push_down_per_event():
    kinds = {"ev": field_kinds(EV_FORMAT), "bare": {}, "ret": {"rv": "num"}}
    assert kinds["ev"] == {"n": "num", "nx": "num", "s": "str", "c": "other", "arr": "other"}
    plan = push_down(parse('event == "ev" && n > 100 && s ~ "q*" || event == "bare" && pid == 5'), kinds)
    assert plan.kernel == {"ev": '(n > 100 && s ~ "q*")', "bare": "common_pid == 5"}
    assert plan.never == ["ret"] and plan.view_only == {}
    plan = push_down(parse('comm == "a-b c" || c == "Z"'), kinds)
    assert plan.kernel == {"bare": 'comm == "a-b c"', "ret": 'comm == "a-b c"'}
    assert "c ==" in plan.view_only["ev"]  # a char is printed 'Z' but stored as a number
    plan = push_down(parse('event ~ "*" || tgid == 3'), kinds)
    assert plan.kernel == {"ev": "", "bare": "", "ret": ""}  # always true: nothing to write
    assert push_down(parse("cpu == 1 && !(rv < 0)"), {"ret": {"rv": "num"}}).kernel == {"ret": "(CPU == 1 && !(rv < 0))"}
    assert "header field" in push_down(parse('comm == "x"'), {"e": {"comm": "str"}}).view_only["e"]
    assert push_down(parse("n == 1"), {"e": None}).view_only == {"e": "its format file could not be read"}


def test_network_byte_order_in_the_view_and_in_the_kernel():
    """ntohs/ntohl: compared swapped in the view, pushed down as the swapped constant where exact."""
    tree = parse("ntohs(dport) == 53 && ntohl(addr) != 0x7f000001")
    assert tree == BoolOp("&&", Compare("dport", "==", 53, 0, "ntohs"), Compare("addr", "!=", 0x7F000001, 22, "ntohl"))
    event = _parser.feed(["  x-1 [000] ..... 1.000001: e: (0x1) dport=13568 addr=16777343 wide=13568"])
    event += _parser.flush()
    assert compile_filter(parse("ntohs(dport) == 53"))(event[0])
    assert not compile_filter(parse("ntohl(addr) != 0x7f000001"))(event[0])
    assert compile_filter(parse("ntohs(dport) >= 50 && ntohs(dport) < 54"))(event[0])
    kinds = {"e": {"dport": "num", "addr": "num", "wide": "num"}}
    layout = {"e": {"dport": (2, False), "addr": (4, False), "wide": (8, False)}}
    assert push_down(parse("ntohs(dport) == 53"), kinds, layout).kernel == {"e": "dport == 13568"}
    assert push_down(parse("ntohl(addr) == 0x7f000001"), kinds, layout).kernel == {"e": "addr == 16777343"}
    signed = push_down(parse("ntohs(dport) == 128"), kinds, {"e": {"dport": (2, True)}})
    assert signed.kernel == {"e": "dport == -32768"}  # 0x8000 in a signed 16-bit field, as the kernel reads it
    for text, why in (("ntohs(dport) > 53", "keep no order"), ("ntohs(wide) == 53", "64 bits wide"),
                      ("ntohs(dport) == 70000", "does not fit"), ("ntohs(pid) == 1", "numeric field")):
        assert why in push_down(parse(text), kinds, layout).view_only["e"], text


@pytest.mark.parametrize("text, column, words", [
    ("ntohs(1) == 2", 7, "takes a field name"), ("ntohs(port == 1", 12, "expected )"),
])
def test_byte_order_errors_point_at_the_offending_column(text, column, words):
    with pytest.raises(FilterError) as caught:
        parse(text)
    assert caught.value.position + 1 == column and words in caught.value.problem


def test_field_layout_reads_sizes_and_signedness():
    from kprobe_tui.stream.filterexpr import field_layout

    layout = field_layout(EV_FORMAT)
    assert layout["n"] == (8, True) and layout["nx"] == (8, False) and layout["c"] == (1, False)
    assert layout["s"] == (4, True) and layout["arr"] == (16, True) and layout["common_pid"] == (4, True)
