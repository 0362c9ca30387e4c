"""``graph FUNC --retval`` in the guests, which have no ``funcgraph-retval``: return probes give the calls their
values. A static program opens a missing file 4 times and itself once; each failing open's -ENOENT is marked where
it came from, and bpftrace 0.17's ``kretprobe`` on the same functions, over the same program, sees the same values.
The return probes and the tracer go when the run ends."""

from __future__ import annotations

import json
import re
import subprocess
from collections import Counter

import pytest
from test_graph_guest import kprobe_tui, settings
from test_stacks_guest import start_bpftrace, static_program, stop_bpftrace

pytestmark = pytest.mark.kernel

COMM = "kptui_opens"
MISSING = 4
PROGRAM = r"""
#include <fcntl.h>
#include <unistd.h>
int main(int argc, char **argv) {
    for (int i = 0; i < MISSING; i++) if (open("/kptui-no-such-file", O_RDONLY) != -1) return 1;
    return open(argv[0], O_RDONLY) < 0;
}
""".replace("MISSING", str(MISSING))


def test_each_failing_call_marks_where_its_error_came_from_and_bpftrace_sees_those_values(tracefs, tmp_path):
    program = static_program(tmp_path, COMM, PROGRAM)
    before, events_before = settings(tracefs), tracefs.read("kprobe_events")
    ours = kprobe_tui("graph", "do_sys_openat2", "--retval", "--json", "--", str(program))
    assert ours.returncode == 0, ours.stderr
    assert settings(tracefs) == before and tracefs.read("kprobe_events") == events_before
    report = json.loads(ours.stdout)
    paths = {tuple(p["path"]): p for p in report["paths"]}
    top = paths[("do_sys_openat2",)]
    assert top["calls"] == MISSING + 1 and top["errors"] == {"-2": MISSING}
    # Every failing call's first error comes from deeper down (its callees were probed before it ran), one place.
    [(origin, found)] = [(path, p) for path, p in paths.items() if p["first_errors"]]
    assert len(origin) > 1 and found["first_errors"] == MISSING and found["errors"] == {"-2": MISSING}
    returns = report["return_values"]
    assert "do_sys_openat2" in returns["probed"] and "putname" in returns["void"]  # void putname(...): no value
    assert not {name for path in paths for name in path} & {"kprobe_ftrace_handler", "kretprobe_rethook_handler"}
    print(origin, found, report["return_values"])

    each = kprobe_tui("graph", "do_sys_openat2", "--retval", "--each", "--", str(program))
    assert each.returncode == 0, each.stderr
    marked = [line for line in each.stdout.splitlines() if line.endswith("<- first error")]
    assert len(marked) == MISSING and all(" = -2 ENOENT" in line for line in marked)
    assert all(f" {origin[-1]} = -2 ENOENT  <- first error" in line for line in marked)

    function = origin[-1].split(" [")[0]
    if not re.fullmatch(r"\w+", function):  # bpftrace 0.17 cannot name "open_last_lookups.isra.0"
        return
    bpftrace = start_bpftrace(f'kretprobe:do_sys_openat2, kretprobe:{function} /comm == "{COMM}"/ '
                              '{ @[probe, retval] = count(); }', tmp_path)
    try:
        subprocess.run([str(program)], check=True)
    finally:
        stop_bpftrace(bpftrace)
    theirs = Counter({(probe, int(value)): int(count) for probe, value, count in
                      re.findall(r"@\[kretprobe:(\w+), (-?\d+)\]: (\d+)", (tmp_path / "bpftrace.out").read_text())})
    print(theirs)
    assert theirs[("do_sys_openat2", -2)] == MISSING
    assert theirs[(function, -2)] == found["errors"]["-2"]  # where each failing open's error came from
