"""What the kernel and the user write into a tail: filters, trace lines, hist files.

A filter gives a tree (then a predicate and a push-down) or a UserError; trace lines and hist files
are never refused, only counted: any text gives events and tables.
"""

from __future__ import annotations

from contextlib import suppress

from hypothesis import example, given
from hypothesis import strategies as st

from kprobe_tui.aggregate.histfile import parse_hist
from kprobe_tui.errors import UserError
from kprobe_tui.stream import filterexpr
from kprobe_tui.stream.parser import LineParser, parse_args
from tests.conftest import FIXTURES
from tests.property.mutation import examples, mutated_text, text_inputs

FILTERS = [
    'comm == "sshd" && len > 100 || event ~ "tcp_*"', "ntohs(dport) == 53", "!(pid != 1) && (cpu <= 0x3 || flags ~ '*d*')",
    "ntohl(addr) != 16777343 && len >= -5", "time > 1.5 || tgid < 10", 'site == "do_sys_openat2+0x0/0x170"',
    'fname ~ "/etc/*" && !(dfd == -100)',
]
FILTER_TOKENS = ("&&", "||", "!", "(", ")", "==", "!=", "<=", ">=", "<", ">", "~", "ntohs(", "ntohl(", '"*"', "'x'",
                 "0x", "1.5", "09", "len", "comm", "event", "dport")
FORMAT = (FIXTURES / "hist" / "6.12" / "work.format").read_text()
TRACE_LINES = [line for path in sorted((FIXTURES / "trace_lines").glob("*.txt")) for line in path.read_text().splitlines()]
EVENTS_OF_FIXTURES = LineParser().feed(TRACE_LINES)[:40]
HISTS = [path.read_text() for path in sorted((FIXTURES / "hist").glob("*/*.hist"))]


@examples(300)
@given(text_inputs(FILTERS, FILTER_TOKENS))
def test_filters_parse_evaluate_and_push_down_or_are_refused(text):
    try:
        node = filterexpr.parse(text)
    except UserError:
        return
    predicate = filterexpr.compile_filter(node)
    for event in EVENTS_OF_FIXTURES:
        predicate(event)
    kinds, layout = filterexpr.field_kinds(FORMAT), filterexpr.field_layout(FORMAT)
    filterexpr.push_down(node, {"work": kinds, "open": {"fname": "str", "len": "num", "comm": "num"}, "gone": None},
                         {"work": layout})
    with suppress(UserError):
        filterexpr.check_fields(text, list(kinds))


@examples(150)
@given(mutated_text([FORMAT], ("field:", ";", "size:", "signed:", "offset:", "%d", "%s", '\\"%s\\"', "print fmt:")),
       st.sampled_from(FILTERS))
@example("\tfield:" + "a" * 16000, FILTERS[1])  # seconds of regex backtracking, once
def test_push_down_takes_any_format_text(format_text, text):
    node = filterexpr.parse(text)
    kinds, layout = filterexpr.field_kinds(format_text), filterexpr.field_layout(format_text)
    filterexpr.push_down(node, {"work": kinds}, {"work": layout})


LINE_TOKENS = (" => ", "<stack trace>", "CPU:0 [LOST 3 EVENTS]", "-123 ", "(  12)", "[001]", " 1.5: ", '="', "={",
               "=(fault)", "=0x", " (", ")", "\n")


@examples(300)
@given(st.lists(text_inputs(TRACE_LINES, LINE_TOKENS), max_size=8), st.lists(st.booleans(), max_size=8))
@example(["  prog-" + "1" * 4400 + "  [000] ..... 1.0: ev: (0x1) n=1"], [])  # int()'s 4300-digit limit, once
def test_trace_lines_always_give_events(lines, quiet_after):
    parser = LineParser()
    for line, quiet in zip(lines, quiet_after + [False] * len(lines)):
        for event in parser.feed([line]) + (parser.flush_if_quiet() if quiet else []):
            event.as_dict()
            assert isinstance(event.site, str)
    for event in parser.flush():
        event.as_dict()


@examples(300)
@given(text_inputs([line.partition(": ")[2].partition(": ")[2] for line in TRACE_LINES], LINE_TOKENS))
def test_argument_bodies_always_give_arguments(body):
    parse_args(body)


HIST_TOKENS = ("# trigger info: hist:keys=", ".execname", ".log2", ".buckets=", ".hex", ".sym", ",", ":vals=", " [active]",
               " [paused]", "{ ", " } hitcount: ", "\t", "    Hits: ", "Totals:", "~ 2^", "if ", "\n", "9" * 4400)


@examples(200)
@given(mutated_text(HISTS, HIST_TOKENS), st.sampled_from([frozenset(), frozenset({"kptui_comm", "comm"})]))
@example("# trigger info: hist:keys=lat.buckets=x:vals=hitcount [active]\n", frozenset())  # int('x'), once
def test_hist_files_always_give_tables(text, strings):
    parse_hist(text, strings)
