"""The raw reader against the kernel's own text: the same recorded events, decoded from trace_pipe_raw's pages,
equal what the text parser makes of the lines the instance's ``trace`` file prints for them."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from kprobe_tui.kernel import lifetime
from kprobe_tui.kernel.events import Events
from kprobe_tui.kernel.instance import Instance
from kprobe_tui.kernel.tracefs import Tracefs
from kprobe_tui.probes.compile import compile_spec
from kprobe_tui.probes.spec import parse_spec
from kprobe_tui.stream.parser import Event, LineParser
from kprobe_tui.stream.rawformat import compile_format
from kprobe_tui.stream.rawpages import RawPages

pytestmark = pytest.mark.live

SOURCE = r"""
#include <stdlib.h>
__attribute__((noinline)) long hit(long n, const char *s, const unsigned char *arr, const char *none)
{
    asm volatile("" ::: "memory");
    return n + s[0] + arr[0] + (none != 0);
}

int main(int argc, char **argv)
{
    static const char *words[] = {"alpha", "beta gamma", "delta \"q\"", "", "caf\xc3\xa9 \xff", "two\nlines"};
    long calls = atol(argv[1]), sum = 0;
    for (long i = 0; i < calls; i++) {
        unsigned char arr[4] = {(unsigned char)i, 200, 7, 255};
        sum += hit(i * 1000 - 3, words[i % 6], arr, 0);
    }
    return sum == 0;
}
"""
ENTRY = ["hit", "a=%di:u8", "b=%di:s16", "c=%di:u32", "d=%di:x64", "s=+0(%si):string", "arr=+0(%dx):u8[4]",
         "none=+0(%cx):string"]
RETURN = ["hit%return", "$retval:s32", "whole=$retval"]
CALLS = 400  # per CPU: ~90 KB of records, some 20 pages each, read 2 at a time to exercise the merge


def kernel_state(root: Path) -> tuple[list[str], list[str]]:
    """Our part of the kernel's state: other engineers' tests run at the same time."""
    group = lifetime.run_name()
    return ([line for line in (root / "uprobe_events").read_text().splitlines() if f":{group}/" in line],
            [name for name in os.listdir(root / "instances") if name == group])


@pytest.fixture
def top(tracefs_root) -> Tracefs:
    before = kernel_state(tracefs_root)
    yield Tracefs(tracefs_root)
    assert kernel_state(tracefs_root) == before


def kernel_comm(saved_cmdlines: str):
    """The name the text gives a pid (trace_find_cmdline): <idle> for 0, saved_cmdlines', else <...>."""
    saved = {int(pid): comm for pid, comm in re.findall(r"^(\d+) (.*)$", saved_cmdlines, re.M)}
    return lambda pid: "<idle>" if pid == 0 else saved.get(pid, "<...>")


def record_both_ways(top: Tracefs, binary: Path) -> tuple[list[Event], list[Event], RawPages]:
    """Records the program on each CPU, stops recording, then reads the instance's ``trace`` (which leaves the
    events in place) and after it consumes the same events from ``trace_pipe_raw``."""
    events = Events(top)
    probes = [compile_spec(parse_spec(words, binary=str(binary)), lifetime.run_name())[0] for words in (ENTRY, RETURN)]
    instance = Instance(top)
    instance.create()
    created = []
    try:
        created = events.create(probes, run_scoped=True)
        for probe in probes:
            instance.enable(probe.group, probe.event)
        # at once, one on each CPU: their events interleave in time, and the reader must merge them as the text does
        runs = [subprocess.Popen(["taskset", "-c", str(cpu), str(binary), str(CALLS)]) for cpu in sorted(os.sched_getaffinity(0))[:2]]
        assert [run.wait() for run in runs] == [0] * len(runs)
        instance.tracefs.write("tracing_on", "0", append=False)
        # as the text reader decodes trace_pipe (StreamReader), which the decoder follows
        text = instance.tracefs.path("trace").read_bytes().decode("utf-8", "backslashreplace")
        comm = kernel_comm(top.read("saved_cmdlines"))
        decoders = {}
        for probe in probes:
            decoder = compile_format(instance.event_format(probe.group, probe.event))
            decoders[decoder.id] = decoder
        pages = RawPages(instance, pages_per_read=2)
        decoded = []
        try:
            while records := pages.read():
                for ts, cpu, record in records:
                    decoder = decoders[int.from_bytes(record[:2], "little")]
                    pid = int.from_bytes(record[4:8], "little", signed=True)
                    decoded.append(decoder.decode(record, ts, cpu, comm(pid)))
        finally:
            pages.close()
    finally:
        instance.remove()
        for event in created:
            events.delete(event)
    parser = LineParser()
    printed = [event for event in parser.feed(text.splitlines()) + parser.flush() if event.event]
    return printed, decoded, pages


def test_raw_pages_decode_to_the_events_the_kernel_printed(top, tmp_path):
    (tmp_path / "rawlab.c").write_text(SOURCE)
    binary = tmp_path / "rawlab"
    subprocess.run(["gcc", "-O1", "-o", str(binary), str(tmp_path / "rawlab.c")], check=True)
    printed, decoded, pages = record_both_ways(top, binary)
    cpus = min(2, len(os.sched_getaffinity(0)))
    assert len(printed) == 2 * CALLS * cpus and pages.missed == pages.missed_uncounted == pages.broken == 0
    assert {event.cpu for event in printed} == set(sorted(os.sched_getaffinity(0))[:2])
    for text_event, raw_event in zip(printed, decoded):
        assert raw_event == text_event  # ts to the microsecond, cpu, pid, comm, flags, event, body
    assert len(decoded) == len(printed)
    bodies = {event.body.split(") ", 1)[1] for event in printed}
    # the fetch types as the kernel prints them, a fault, and strings that are not plain text
    assert 'a=253 b=-3 c=4294967293 d=0xfffffffffffffffd s="alpha" arr={0,200,7,255} none=(fault)' in bodies
    assert 'a=157 b=3997 c=3997 d=0xf9d s="café \\xff" arr={4,200,7,255} none=(fault)' in bodies
    assert 'a=133 b=4997 c=4997 d=0x1385 s="two\nlines" arr={5,200,7,255} none=(fault)' in bodies
    assert "retval=94 whole=0x5e" in bodies
