"""The trace_pipe line parser on real captured lines (tests/fixtures/trace_lines)."""

from __future__ import annotations

import itertools
import re

import pytest

from kprobe_tui.stream.parser import FAULT, Hex, LineParser, typed
from tests.conftest import FIXTURES

LINES = FIXTURES / "trace_lines"


def parse_file(name: str):
    parser = LineParser()
    return parser, parser.feed((LINES / name).read_text().splitlines()) + parser.flush()


def test_header_fields_with_tgid_and_comm_with_spaces_and_dashes():
    parser, events = parse_file("uprobe_tgid_stack.txt")
    first = events[0]
    assert (first.comm, first.pid, first.tgid, first.cpu, first.flags) == ("my-1 x-2", 8039, 8039, 1, "DBZff")
    assert first.ts == 281.304027 and first.event == "bare" and first.site == "0x563545710159"
    assert first.args == {}
    assert parser.counts.garbled == 0


def test_typed_arguments():
    _, events = parse_file("uprobe_plain.txt")
    ev = events[1]
    assert ev.tgid is None and ev.comm == "a-b c"
    assert ev.args == {"n": 100, "nx": 100, "s": 'quote "q" \\ end', "c": "Z", "arr": [0, 0, 0, 0],
                       "bad": FAULT, "u": 100, "comm": "a-b c"}
    assert isinstance(ev.args["nx"], Hex) and str(ev.args["nx"]) == "0x64"
    assert events[2].site == "0x55663694b202 <- 0x55663694b159" and events[2].args == {"rv": 290}


def test_stack_traces_attach_to_their_event_and_strings_may_hold_newlines():
    parser, events = parse_file("uprobe_tgid_stack.txt")
    assert [e.event for e in events] == ["bare", "ev", "ret"] * 3
    assert events[3].stack[:2] == ("__uprobe_trace_func", "uprobe_dispatcher")
    assert events[5].stack[1] == "uretprobe_dispatcher"
    assert events[6].stack == ("<00005638c889b159>",)  # userstacktrace
    assert events[0].stack is None
    assert events[4].args["s"] == "tab\tnl\nx" and events[4].args["c"] == "Z"
    assert parser.counts.continued == 1


@pytest.mark.parametrize("kernel", ["6.1", "6.12"])
def test_real_kprobe_and_kretprobe_lines_from_the_qemu_guests(kernel):
    """Captured by capture_kprobes.sh in Debian's kernels: entry and return sites, negative ints,
    strings, hex, u8 arrays, $comm, record-tgid."""
    parser, events = parse_file(f"kprobe_{kernel}.txt")
    raw = (LINES / f"kprobe_{kernel}.txt").read_text().splitlines()
    assert len(events) == len(raw) and parser.counts.garbled == 0
    assert {e.event for e in events} == {"open", "open_ret", "bytes"}
    for line, event in zip(raw, events):
        assert line.split("-", 1)[0].strip() == event.comm and f"-{event.pid} " in line
        assert event.tgid == event.pid  # single-threaded sh and cat
        if event.event == "open":
            assert event.site.startswith("do_sys_openat2+0x0/") and event.args["dfd"] == -100
            fname = event.args["fname"]  # :string on a user pointer: 6.12 faults where 6.1 read it
            assert ("fname=(fault)" if fname is FAULT else f'fname="{fname}"') in line
            assert event.args["comm"] == event.comm
            assert isinstance(event.args["flags"], Hex)
        elif event.event == "open_ret":
            assert event.site.endswith(" <- do_sys_openat2") and isinstance(event.args["ret"], int)
        else:
            # 6.12 reports vfs_read+0x4: the probe sits after the endbr64 landing pad
            assert re.fullmatch(r"vfs_read\+0x[04]/0x[0-9a-f]+", event.site) and len(event.args["first"]) == 4
    missing = [e for e in events if e.event == "open_ret" and e.args["ret"] == -2]
    assert missing, "the capture opens /nonexistent/file: its return is -ENOENT"


def test_kprobe_layouts_without_flags_and_unknown_comm():
    """Older kernels' layout (no flags column, 4-character flags), written by hand from the documented format."""
    _, events = parse_file("kprobe_format.txt")
    assert [(e.comm, e.pid, e.flags) for e in events] == [
        ("cat", 4121, "d..."), ("<...>", 4122, "d..."), ("kworker/u4:2", 88, ""), ("flush-253:0", 409, "")]
    assert events[0].site == "do_sys_openat2+0x0/0x1b0" and events[0].args["filename"] == "/etc/passwd"
    assert events[1].site == "__x64_sys_openat+0x55/0xa0 <- do_sys_openat2" and events[1].args["ret"] == 3
    assert events[3].ts == 4410022.087815 and events[3].args == {"arg1": 0xFFFFFFFF, "arg2": 0x16AFD}


def test_damaged_lines_are_kept_raw_and_counted():
    parser, events = parse_file("damaged.txt")
    assert [e.event for e in events] == ["", "bare", "", "ev"]
    assert events[0].body == "            prog-66" and events[2].body == "garbage without a header"
    assert parser.counts.garbled == 2 and parser.counts.lost_events == 2622 and parser.counts.lost_lines == 1
    assert events[3].args["n"] == 100  # a line cut inside a string still gives what it has


def test_state_carries_across_feeds():
    parser = LineParser()
    lines = (LINES / "uprobe_tgid_stack.txt").read_text().splitlines()
    events = [ev for line in lines for ev in parser.feed([line])]
    assert len(events) == 8  # the newest is held back: a stack or a string's next line may follow
    events += parser.flush()
    assert len(events) == 9 and parser.flush() == [] and events[3].stack and events[4].args["s"] == "tab\tnl\nx"


def test_typed_values():
    assert typed("-12") == -12 and typed("0x10") == 16 and typed("ffff") == 0xFFFF
    assert typed("'a'") == "a" and typed("{}") == [] and typed("{1,-2}") == [1, -2]
    assert typed("do_sys_open+0x0/0x20") == "do_sys_open+0x0/0x20" and typed("(fault)") is FAULT
    assert typed("0xfz") == "0xfz" and typed("-0x10") == -16 and typed("(null)") == "(null)"


def test_an_event_waits_one_quiet_read_for_its_stack():
    """The kernel commits an event's stack trace as a record after the event's: a read may end between
    the two. The event is handed over only after a read that brought nothing more, with its stack."""
    lines = (LINES / "uprobe_tgid_stack.txt").read_text().splitlines()
    stack_at = next(i for i, line in enumerate(lines) if line.endswith("<stack trace>"))
    parser = LineParser()
    handed = parser.feed(lines[:stack_at]) + parser.flush_if_quiet()  # this read ended at the event
    held = len(handed)
    assert held == stack_at - 1  # the event before the stack is held back
    handed += parser.feed(lines[stack_at:stack_at + 1]) + parser.flush_if_quiet()  # the stack's header only
    assert len(handed) == held
    rest = list(itertools.takewhile(lambda line: line.startswith(" => "), lines[stack_at + 1:]))
    handed += parser.feed(rest) + parser.flush_if_quiet()
    assert len(handed) == held
    handed += parser.flush_if_quiet()  # a read with nothing: the event is complete
    assert len(handed) == held + 1 and handed[-1].stack == tuple(line[4:].strip() for line in rest)
    assert parser.flush_if_quiet() == [] and parser.flush() == []


def test_a_stack_that_comes_after_another_cpus_event_goes_to_its_own_cpus_event():
    """The text merges the CPUs by time and a stack is stamped after its event: another CPU's event may come
    between (as the kernel printed a uretprobe's stack on 6.18, 1 run in 3 of the live stacks test)."""
    lines = [
        "          boxlab-26971   (  26971) [000] DBZff 25205.159026: hit__return: (0x55ad <- 0x5139) ret=1",
        "          boxlab-26973   (  26973) [001] DBZff 25205.159031: hit__return: (0x55ad <- 0x5139) ret=2",
        "          boxlab-26971   (  26971) [000] DBZff 25205.159033: <stack trace>",
        " => __uprobe_trace_func",
        " => uretprobe_dispatcher",
        "          boxlab-26973   (  26973) [001] DBZff 25205.159035: <stack trace>",
        " => __uprobe_trace_func",
        " => uretprobe_dispatcher",
        " => uprobe_handle_trampoline",
    ]
    parser = LineParser()
    events = parser.feed(lines) + parser.flush()
    assert [(event.pid, event.stack) for event in events] == [
        (26971, ("__uprobe_trace_func", "uretprobe_dispatcher")),
        (26973, ("__uprobe_trace_func", "uretprobe_dispatcher", "uprobe_handle_trampoline"))]
