"""The binary reader against the kernel's text for kernel events, inside the 6.1 and 6.12 guests.

The same recorded events (a kprobe and a kretprobe on vfs_read, a tracepoint, and fprobes where the kernel
has them), on both CPUs: the text parser's events of the lines the instance's ``trace`` prints, and the
binary reader's (``StreamReader`` on ``RawPagesSource``, sites named by kallsyms) of the same buffer's
``trace_pipe_raw`` pages, compared event for event; then a flood that overwrites a small buffer, whose loss
the text reader counts from the per-CPU stats and the binary reader from the page headers. Few tests: Python
runs 15-25x slower here.
"""

from __future__ import annotations

import subprocess
import time

import pytest

from kprobe_tui.kernel import lifetime
from kprobe_tui.kernel.instance import Instance
from kprobe_tui.kernel.tracefs import KernelRefused
from kprobe_tui.stream.parser import Event, LineParser
from kprobe_tui.stream.reader import RawPagesSource, StreamReader, TracePipeSource
from kprobe_tui.stream.store import EventStore

pytestmark = pytest.mark.kernel

KPROBES = {  # control file -> definitions (GROUP filled in)
    "kprobe_events": ["p:{group}/vr vfs_read file=%di:x64 count=%dx:u32 low=%dx:s16 caller=$stack0:symbol cm=$comm",
                      "r:{group}/vrr vfs_read ret=$retval:s64 retx=$retval:x32"],
}
FPROBES = ["f:{group}/fvr vfs_read", "f:{group}/fvrr vfs_read%return ret=$retval:s64"]  # 6.7 and later
TRACEPOINT = ("sched", "sched_process_exec")
WORKLOAD = "for i in 1 2 3 4 5 6; do cat /proc/version > /dev/null; done"


@pytest.mark.parametrize("irq_info", [True, False])
def test_the_binary_reader_gives_the_events_the_kernel_printed(tracefs, irq_info):
    """irq-info off as well: a new instance takes the top level's options, and after other guest tests the 6.1
    guest's had it off (the text then has no flags column)."""
    group = lifetime.run_name()
    made: list[tuple[str, str]] = []  # (control file, group/event)
    instance = Instance(tracefs)
    instance.create(None, {"record-tgid": True, "irq-info": irq_info})
    try:
        for control, definitions in [*KPROBES.items(), ("dynamic_events", FPROBES)]:
            for definition in definitions:
                line = definition.format(group=group)
                try:
                    tracefs.write(control, line + "\n")
                except KernelRefused:
                    assert line.startswith("f:"), line  # only fprobes may be missing (before 6.7)
                    continue
                made.append((control, line.split(" ", 1)[0].split(":", 1)[1]))
        targets = [tuple(name.split("/")) for _, name in made] + [TRACEPOINT]
        for target in targets:
            instance.enable(*target)
        runs = [subprocess.Popen(["taskset", "-c", str(cpu), "sh", "-c", WORKLOAD]) for cpu in (0, 1)]
        assert [run.wait() for run in runs] == [0, 0]
        instance.tracefs.write("tracing_on", "0", append=False)
        printed, text_lost = printed_events(instance)
        decoded, binary_lost = binary_events(instance, targets, len(printed))
    finally:
        instance.remove()
        for control, name in reversed(made):
            tracefs.write(control, f"-:{name}\n")
    names = {event.event for event in printed}
    assert {name.split("/")[1] for _, name in made} | {"sched_process_exec"} <= names  # fprobes too where made
    assert {0, 1} <= {event.cpu for event in printed}
    assert text_lost == binary_lost == 0
    for text_event, raw_event in zip(printed, decoded):
        assert raw_event == text_event
    assert len(decoded) == len(printed)
    # named as the kernel names them: the site with its offset (past the ftrace call on 6.12), the return's
    # function without
    assert all(event.body.startswith("(vfs_read+0x") for event in printed if event.event == "vr")
    assert all(" <- vfs_read) ret=" in event.body for event in printed if event.event == "vrr")


def printed_events(instance: Instance) -> tuple[list[Event], int]:
    """The events of the lines the instance's ``trace`` prints (the buffer is not consumed), and the events the
    text reader counts lost (the per-CPU stats)."""
    text = instance.tracefs.path("trace").read_bytes().decode("utf-8", "backslashreplace")
    parser = LineParser()
    return [event for event in parser.feed(text.splitlines()) + parser.flush() if event.event], TracePipeSource(instance).lost()


def binary_events(instance: Instance, targets: list[tuple[str, str]], expected: int) -> tuple[list[Event], int]:
    """The binary reader's events of the buffer's pages (as printed), and the events it counts lost."""
    store = EventStore(expected + 10)
    reader = StreamReader(instance, store, lambda update: None, events=targets)
    assert isinstance(reader.source, RawPagesSource), reader.notice
    reader.start()
    deadline = time.monotonic() + 300
    while store.total < expected and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)
    reader.stop()
    return [event.printed() for event in store.view_rows(0, store.view_len())], reader.lost


def test_a_flood_that_overwrites_the_buffer_loses_the_same_events_in_both_readers(tracefs):
    """dd's one-byte reads on each CPU overwrite a 16 KiB buffer many times over (a record is ~50 bytes): the
    text reader's loss (each CPU's stats: overrun) and the binary reader's (the first page read's missed
    count) must be the same number, and the events left the same."""
    group = lifetime.run_name()
    instance = Instance(tracefs)
    instance.create(16, {"record-tgid": True, "irq-info": True})
    tracefs.write("kprobe_events", f"p:{group}/vr vfs_read count=%dx:u32 cm=$comm\n")
    try:
        tracefs.write(f"events/{group}/vr/filter", 'cm == "dd"', append=False)
        instance.enable(group, "vr")
        floods = [subprocess.Popen(["taskset", "-c", str(cpu), "dd", "if=/dev/zero", "of=/dev/null", "bs=1",
                                    "count=5000", "status=none"]) for cpu in (0, 1)]
        assert [flood.wait() for flood in floods] == [0, 0]
        instance.tracefs.write("tracing_on", "0", append=False)
        printed, text_lost = printed_events(instance)
        decoded, binary_lost = binary_events(instance, [(group, "vr")], len(printed))
    finally:
        instance.remove()
        tracefs.write("kprobe_events", f"-:{group}/vr\n")
    assert {event.cpu for event in printed} == {0, 1}
    assert text_lost > 5000  # of the 10,000 reads, most were overwritten
    assert binary_lost == text_lost
    assert decoded == printed
