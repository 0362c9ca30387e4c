"""The function_graph text read back into calls: lines as the 6.12 guest's tracer printed them (funcgraph-proc,
funcgraph-tail, a module's function), as perf ftrace prints them (no task), and what the kernel lost."""

from __future__ import annotations

from kprobe_tui.stream.callgraph import GraphReader, summarize

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
