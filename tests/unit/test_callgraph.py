"""The function_graph text read back into calls: lines as the 6.12 guest's tracer printed them (funcgraph-proc,
funcgraph-tail, a module's function), as perf ftrace prints them (no task), and what the kernel lost."""

from __future__ import annotations

import json
from pathlib import Path

from kprobe_tui.stream.callgraph import Call, GraphReader, error_name, error_of, first_failure, summarize

# tests/kernel/test_graph_guest.py's workload in the 6.12 guest, depth 3 (two calls; a timer interrupt in the second).
TRACED = """\
# tracer: function_graph
#
# CPU  TASK/PID         DURATION                  FUNCTION CALLS
 0)     dd-167     |               |  vfs_read() {
 0)     dd-167     |               |    rw_verify_area() {
 0)     dd-167     | ! 126.246 us  |      security_file_permission();
 0)     dd-167     | ! 467.932 us  |    } /* rw_verify_area */
 0)     dd-167     |               |    v9fs_file_read_iter [9p]() {
 0)     dd-167     | + 82.965 us   |      netfs_file_read_iter [netfs]();
 0)     dd-167     | + 93.996 us   |    } /* v9fs_file_read_iter [9p] */
 0)     dd-167     | # 1897.326 us |  } /* vfs_read */
 ------------------------------------------
 1)    sh-160     =>    dd-167
 ------------------------------------------
 1)     dd-167     |               |  vfs_read() {
 1)     dd-167     |               |    rw_verify_area() {
 1)     dd-167     |   5.610 us    |      irq_enter_rcu();
 1)     dd-167     | + 10.159 us   |      security_file_permission();
 1)     dd-167     | + 17.603 us   |    } /* rw_verify_area */
 1)     dd-167     |   1.000 us    |    __get_task_ioprio();
 1)     dd-167     | + 54.853 us   |  } /* vfs_read */
"""


def test_calls_nest_per_thread_and_each_outermost_call_is_returned_when_it_returns():
    reader = GraphReader()
    first, second = reader.feed(TRACED.splitlines())
    assert (first.name, first.task, first.pid, first.cpu, first.ns) == ("vfs_read", "dd", 167, 0, 1_897_326)
    assert [child.name for child in first.children] == ["rw_verify_area", "v9fs_file_read_iter [9p]"]
    assert first.children[1].children[0].name == "netfs_file_read_iter [netfs]"
    assert second.cpu == 1 and [c.name for c in second.children[0].children] == ["irq_enter_rcu", "security_file_permission"]
    assert reader.orphans == 0 and reader.open_calls == 0


def test_summary_is_per_path_in_tree_order_with_self_time():
    totals = {entry.path: entry for entry in summarize(GraphReader().feed(TRACED.splitlines()))}
    assert list(totals)[:3] == [("vfs_read",), ("vfs_read", "rw_verify_area"),
                                ("vfs_read", "rw_verify_area", "security_file_permission")]
    assert list(totals)[-1] == ("vfs_read", "__get_task_ioprio")  # seen last, placed under its parent
    root = totals[("vfs_read",)]
    assert (root.calls, root.total_ns) == (2, 1_897_326 + 54_853)
    assert root.self_ns == 1_897_326 - 467_932 - 93_996 + 54_853 - 17_603 - 1_000
    assert totals[("vfs_read", "rw_verify_area")].calls == 2


def test_perf_ftraces_lines_without_a_task_nest_per_cpu():
    perf = " 1)               |  vfs_read() {\n 1) + 70.613 us   |    read_zero();\n 1) # 1181.117 us |  }\n"
    [call] = GraphReader().feed(perf.splitlines())
    assert (call.name, call.ns, call.task, [c.name for c in call.children]) == ("vfs_read", 1_181_117, "", ["read_zero"])


def test_a_task_named_like_the_layout_stays_a_name():
    line = " 0)  a-1 |x-42     |   2.000 us    |  vfs_read();"
    [call] = GraphReader().feed([line])
    assert (call.task, call.pid, call.ns) == ("a-1 |x", 42, 2000)


def test_what_the_kernel_lost_is_counted_not_guessed():
    lines = TRACED.splitlines()
    reader = GraphReader()
    assert reader.feed(lines[5:11]) == [] and reader.orphans == 6  # begun before the start: no entry above them
    assert reader.feed(lines[14:18]) == [] and reader.open_calls == 2  # cut before it returns
    [call] = reader.feed(lines[3:11])  # a whole call after all that is read whole
    assert call.ns == 1_897_326 and reader.orphans == 7  # the open call above it was left for it


# Return probes' events among the graph's lines, as the tracer prints a comment: each after the "}" or the leaf it
# ends (the order the 6.1 and 6.12 guests print), an outer call's value the line after its own.
RETURNS = {"r1_do_sys_openat2": "do_sys_openat2", "r2_getname": "getname", "r3_do_filp_open": "do_filp_open",
           "r4_path_openat": "path_openat", "r5_link_path_walk": "link_path_walk"}
FAILING_OPEN = """\
 1)    cat-201     |               |  do_sys_openat2() {
 1)    cat-201     |   3.001 us    |    getname();
 1)    cat-201     |               |    /* r2_getname: (do_sys_openat2+0x5b/0x160 <- getname) ret=0xffff8880049e9000 */
 1)    cat-201     |               |    do_filp_open() {
 1)    cat-201     |               |      path_openat() {
 1)    cat-201     |   1.200 us    |        link_path_walk();
 1)    cat-201     |               |        /* r5_link_path_walk: (path_openat+0x96/0x1340 <- link_path_walk) ret=0xfffffffe */
 1)    cat-201     |   9.000 us    |      } /* path_openat */
 1)    cat-201     |               |      /* r4_path_openat: (do_filp_open+0xa9/0x150 <- path_openat) ret=0xfffffffffffffffe */
 1)    cat-201     | + 12.500 us   |    } /* do_filp_open */
 1)    cat-201     |               |    /* r3_do_filp_open: (do_sys_openat2+0x9f/0x160 <- do_filp_open) ret=0xfffffffffffffffe */
 1)    cat-201     | + 20.000 us   |  } /* do_sys_openat2 */
 1)    cat-201     |               |  /* r1_do_sys_openat2: (__x64_sys_openat+0x55/0xa0 <- do_sys_openat2) ret=0xfffffffffffffffe */
"""


def test_return_values_go_to_the_calls_they_end_and_the_first_error_is_where_it_came_from():
    reader = GraphReader(returns=RETURNS)
    assert reader.feed(FAILING_OPEN.splitlines()[:-1]) == []  # its value is still to come: held
    [call] = reader.feed(FAILING_OPEN.splitlines()[-1:])
    assert call.retval == (1 << 64) - 2 and call.error == -2
    getname, do_filp_open = call.children
    assert getname.retval == 0xffff8880049e9000 and getname.error is None  # a pointer, no error
    path_openat = do_filp_open.children[0]
    assert path_openat.children[0].error == -2  # an int's -2 (0xfffffffe) is sign-extended as the kernel does
    assert first_failure(call) is path_openat.children[0]
    totals = {entry.path[-1]: entry for entry in summarize([call])}
    assert totals["link_path_walk"].first_errors == 1 and totals["path_openat"].first_errors == 0
    assert totals["do_sys_openat2"].errors == {-2: 1} and totals["getname"].failed == 0


def test_a_value_printed_before_its_return_goes_to_the_call_still_open():
    before = """\
 0)    cat-7       |               |  do_sys_openat2() {
 0)    cat-7       |               |    do_filp_open() {
 0)    cat-7       |               |      /* r3_do_filp_open: (do_sys_openat2+0x9f/0x160 <- do_filp_open) ret=0x0 */
 0)    cat-7       |   5.000 us    |    } /* do_filp_open */
 0)    cat-7       |               |    /* r1_do_sys_openat2: (x+0x1/0x2 <- do_sys_openat2) ret=0x3 */
 0)    cat-7       |   8.000 us    |  } /* do_sys_openat2 */
"""
    [call] = GraphReader(returns=RETURNS).feed(before.splitlines())  # handed out at once: its value came
    assert (call.retval, call.children[0].retval, first_failure(call)) == (3, 0, None)


def test_a_call_whose_value_never_comes_is_handed_out_by_its_threads_next_line_or_the_flush():
    lines = FAILING_OPEN.splitlines()[:-1]  # the outer value lost
    reader = GraphReader(returns=RETURNS)
    assert reader.feed(lines) == []
    [first] = reader.feed(lines[:1])  # the thread calls again: the first call is out, without its value
    assert first.retval is None and first.children[1].retval is not None
    assert reader.flush() == [] and reader.open_calls == 1
    reader = GraphReader(returns=RETURNS)
    reader.feed(lines)
    [held] = reader.flush()
    assert held.retval is None and reader.flush() == []


def test_a_value_of_another_thread_or_a_call_outside_the_graph_is_left_alone():
    other = """\
 0)    cat-7       |               |  do_sys_openat2() {
 1)    sh-9        |               |  /* r3_do_filp_open: (x+0x1/0x2 <- do_filp_open) ret=0xfffffffffffffff3 */
 0)    cat-7       |               |    /* r4_path_openat: (x+0x1/0x2 <- path_openat) ret=0xfffffffffffffff3 */
 0)    cat-7       |   8.000 us    |  } /* do_sys_openat2 */
"""
    reader = GraphReader(returns=RETURNS)
    assert reader.feed(other.splitlines()) == []
    [call] = reader.flush()
    assert call.retval is None and first_failure(call) is None


def test_error_codes_as_the_kernel_tells_them():
    assert [error_of(v) for v in (0, 1, (1 << 64) - 4095, (1 << 64) - 4096, 0xffffffff, 0x80000000)] == \
        [None, None, -4095, None, -1, None]
    assert error_name(-2) == "-2 ENOENT" and error_name(-512) == "-512"


def test_the_6_12_guests_trace_gives_every_call_its_value_and_each_failing_open_its_origin():
    """The real text (tests/fixtures/graph): each value printed after its call's "}", at its caller's depth; the
    exec'ing python's values before the program's first open belong to no graphed call."""
    lines = (Path(__file__).parents[1] / "fixtures" / "graph" / "do_sys_openat2-retval-6.12.txt").read_text().splitlines()
    probes = json.loads(next(line[3:] for line in lines if line.startswith("#R ")))
    reader = GraphReader(returns=probes["functions"])
    calls = reader.feed(lines) + reader.flush()
    assert [call.error for call in calls] == [-2, -2, -2, -2, None] and calls[-1].retval == 3
    assert [first_failure(call).name for call in calls[:4]] == ["path_openat"] * 4 and first_failure(calls[4]) is None
    probed = set(probes["functions"].values())

    def unvalued(call):
        missing = [call.name] if call.name in probed and call.retval is None else []
        return missing + [name for child in call.children for name in unvalued(child)]

    # idle_cpu ran in an interrupt inside the first call: not in do_sys_openat2's code, it was probed once that
    # call had shown it (r18, the last made), too late for that call, and no later call had an interrupt.
    assert [name for call in calls for name in unvalued(call)] == ["idle_cpu"]
    assert reader.orphans == 0 and reader.open_calls == 0


def test_a_function_name_holding_an_escape_sequence_is_printed_escaped(capsys):
    """A module's symbol is the module author's text: the graph's lines print it as text, never as a sequence."""
    from kprobe_tui.commands.graph import _print_call, _row

    hostile = "evil\x1b]0;owned\x07\x1b[2J [mod]"
    call = Call(hostile, 7, "cat", 0, 1000, [Call(hostile, 7, "cat", 0, 500, retval=(1 << 64) - 2)], retval=0)
    _print_call(call)
    [entry, child] = summarize([call])
    printed = capsys.readouterr().out + _row(entry, True) + _row(child, True)
    assert "\x1b" not in printed and "\x07" not in printed and "evil" in printed and "-2 ENOENT" in printed
