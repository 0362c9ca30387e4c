"""The raw reader against the kernel's own text: the same recorded events, decoded from trace_pipe_raw's pages,
equal what the text parser makes of the lines the instance's ``trace`` file prints for them (the text reader's
own parser, on what trace_pipe would print): first the page walk and decoder, then the whole binary reader
(``StreamReader`` on ``RawPagesSource``: comm, tgid, lost counts) on every fetch type a uprobe captures."""

from __future__ import annotations

import os
import re
import subprocess
import time
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
from kprobe_tui.stream.rawpages import RawPages, seconds
from kprobe_tui.stream.reader import RawPagesSource, StreamReader, StreamUpdate, TracePipeSource
from kprobe_tui.stream.session import TailSession
from kprobe_tui.stream.store import EventStore

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
                for ns, cpu, record in records:
                    decoder = decoders[int.from_bytes(record[:2], "little")]
                    pid = int.from_bytes(record[4:8], "little", signed=True)
                    decoded.append(decoder.decode(record, seconds(ns), cpu, comm(pid)))
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
        assert raw_event.printed() == text_event  # ts to the microsecond, cpu, pid, comm, flags, event, body
    assert len(decoded) == len(printed)
    bodies = {event.body.split(") ", 1)[1] for event in printed}
    # the fetch types as the kernel prints them, a fault, and strings that are not plain text
    assert 'a=253 b=-3 c=4294967293 d=0xfffffffffffffffd s="alpha" arr={0,200,7,255} none=(fault)' in bodies
    assert 'a=157 b=3997 c=3997 d=0xf9d s="café \\xff" arr={4,200,7,255} none=(fault)' in bodies
    assert 'a=133 b=4997 c=4997 d=0x1385 s="two\nlines" arr={5,200,7,255} none=(fault)' in bodies
    assert "retval=94 whole=0x5e" in bodies


BOX_SOURCE = r"""
#include <stdlib.h>
struct box { unsigned int low : 3, mid : 5, high : 8; int v; char name[8]; };
__attribute__((noinline)) long hit(long n, const char *s, const unsigned char *arr, struct box *b, const char **pair)
{
    asm volatile("" ::: "memory");
    return n + s[0] + arr[0] + b->v + pair[0][0];
}

int main(int argc, char **argv)
{
    static const char *words[] = {"alpha", "beta gamma", "", "caf\xc3\xa9 \xff", "two\nlines"};
    long calls = atol(argv[1]), sum = 0;
    for (long i = 0; i < calls; i++) {
        unsigned char arr[4] = {(unsigned char)i, 200, 7, 255};
        struct box b = {(unsigned)i & 7, (unsigned)i & 31, 200, (int)-i, "box"};
        const char *pair[2] = {words[(i + 1) % 5], words[(i + 2) % 5]};
        b.name[3] = 'a' + i % 26;
        sum += hit(i * 1000 - 3, words[i % 5], arr, &b, pair);
    }
    return sum == 0;
}
"""
# Every fetch type a uprobe takes (symbol is the kprobes' own), entry and return.
EVERY_TYPE = ["hit", "a=%di:u8", "b=%di:u16", "c=%di:u32", "d=%di:u64", "e=%di:s8", "f=%di:s16", "g=%di:s32",
              "h=%di:s64", "i=%di:x8", "j=%di:x16", "k=%di:x32", "l=%di:x64", "s=+0(%si):string",
              "us=+0(%si):ustring", "lo=+0(%cx):b3@0/32", "mi=+0(%cx):b5@3/32", "hi=+0(%cx):b8@8/32",
              "ch=+8(%cx):char", "nm=+8(%cx):char[8]", "arr=+0(%dx):u8[4]", "xa=+0(%dx):x8[2]",
              "pair=+0(%r8):string[2]", "cm=$comm"]
EVERY_RETURN = ["hit%return", "ret=$retval:s64", "rx=$retval:x32", "ru=$retval:u16"]


def recorded_then_read(top: Tracefs, binary: Path, calls: int, buffer_kb: int | None = None, stacktrace: bool = False,
                       options: dict[str, bool] | None = None, specs=(EVERY_TYPE, EVERY_RETURN)):
    """Records the program on two CPUs at once with nobody reading, stops recording, takes the text the instance's
    ``trace`` prints and the lost count the text reader would give (stats), then drains the same buffer with the
    binary reader. Returns (text events, binary events, text lost, binary lost, the reader's updates)."""
    events = Events(top)
    probes = [compile_spec(parse_spec(words, binary=str(binary)), lifetime.run_name())[0]
              for words in specs]
    instance = Instance(top)
    instance.create(buffer_kb, {"record-tgid": True, "stacktrace": stacktrace, **(options or {})})  # as a tail makes it
    created = []
    updates: list[StreamUpdate] = []
    try:
        created = events.create(probes, run_scoped=True)
        for probe in probes:
            instance.enable(probe.group, probe.event)
        runs = [subprocess.Popen(["taskset", "-c", str(cpu), str(binary), str(calls)])
                for cpu in sorted(os.sched_getaffinity(0))[:2]]
        assert [run.wait() for run in runs] == [0] * len(runs)
        instance.tracefs.write("tracing_on", "0", append=False)
        text = instance.tracefs.path("trace").read_bytes().decode("utf-8", "backslashreplace")
        text_lost = TracePipeSource(instance).lost()
        parser = LineParser()
        printed = [event for event in parser.feed(text.splitlines()) + parser.flush() if event.event]
        store = EventStore(len(printed) + 10)
        reader = StreamReader(instance, store, updates.append, events=[(p.group, p.event) for p in probes])
        assert isinstance(reader.source, RawPagesSource), reader.notice
        reader.start()
        deadline = time.monotonic() + 60
        while store.total < len(printed) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)  # nothing more may come
        reader.stop()
        decoded = store.view_rows(0, store.view_len())
    finally:
        instance.remove()
        for event in created:
            events.delete(event)
    return printed, decoded, text_lost, reader.lost, updates


def as_printed(events) -> list[Event]:
    return [event.printed() if hasattr(event, "printed") else event for event in events]


@pytest.fixture
def boxlab(tmp_path) -> Path:
    (tmp_path / "boxlab.c").write_text(BOX_SOURCE)
    subprocess.run(["gcc", "-O1", "-o", str(tmp_path / "boxlab"), str(tmp_path / "boxlab.c")], check=True)
    return tmp_path / "boxlab"


def test_the_binary_reader_gives_the_events_the_text_reader_gives(top, boxlab):
    printed, decoded, text_lost, lost, updates = recorded_then_read(top, boxlab, 300)
    cpus = min(2, len(os.sched_getaffinity(0)))
    assert len(printed) == 2 * 300 * cpus and text_lost == lost == 0
    assert as_printed(decoded) == printed  # time, cpu, pid, tgid, comm, flags, event, body: in the same order
    assert {event.cpu for event in decoded} == set(sorted(os.sched_getaffinity(0))[:2])
    assert {event.comm for event in decoded} == {"boxlab"} and None not in {event.tgid for event in decoded}
    assert [event.args for event in decoded] == [event.args for event in printed]
    assert updates[-1].finished and not updates[-1].error and updates[-1].garbled == 0
    bodies = {event.body.split(") ", 1)[1] for event in printed}
    # each fetch type as the kernel prints it, a string holding a newline, bytes that are not UTF-8, an empty one
    assert ('a=253 b=65533 c=4294967293 d=18446744073709551613 e=-3 f=-3 g=-3 h=-3 i=0xfd j=0xfffd k=0xfffffffd'
            ' l=0xfffffffffffffffd s="alpha" us="alpha" lo=0 mi=0 hi=200 ch=\'b\' nm={\'b\',\'o\',\'x\',\'a\','
            '\'\x00\',\'\x00\',\'\x00\',\'\x00\'} arr={0,200,7,255} xa={0x0,0xc8} pair={"beta gamma",""}'
            ' cm="boxlab"') in bodies
    assert any('s="two\nlines"' in body and 'pair={"alpha","beta gamma"}' in body for body in bodies)
    assert any('s="café \\xff"' in body for body in bodies)
    assert "ret=192 rx=0xc0 ru=192" in bodies  # call 0: -3 + 'a' + 0 + 0 + 'b'
    assert "ret=1095 rx=0x447 ru=1095" in bodies  # call 1: 997 + 'b' + 1 - 1 + '\0'


def test_a_flood_of_one_probe_whose_runs_are_made_into_events_together_gives_the_texts_events(top, boxlab):
    """One probe's records come in runs of one header, made into events in C (``RawPagesSource._decode``)."""
    printed, decoded, _, lost, _ = recorded_then_read(top, boxlab, 3000, specs=(EVERY_TYPE,))
    assert len(printed) == 3000 * min(2, len(os.sched_getaffinity(0))) and lost == 0
    assert as_printed(decoded) == printed


def test_a_flood_that_overflows_the_buffer_loses_as_many_events_in_both_readers(top, boxlab):
    printed, decoded, text_lost, lost, updates = recorded_then_read(top, boxlab, 20_000, buffer_kb=64)
    assert text_lost > 0 and lost == text_lost  # the page headers count what the stats count
    assert as_printed(decoded) == printed
    assert max(update.lost for update in updates) == lost


def test_kernel_stacks_come_with_their_events_as_the_text_gives_them(top, boxlab):
    """Each stack with its own CPU's event (the text puts a stack after another CPU's event now and then: the
    parser follows the stack's CPU column)."""
    printed, decoded, *_ = recorded_then_read(top, boxlab, 40, stacktrace=True)
    assert as_printed(decoded) == printed
    dispatchers = {"hit": "uprobe_dispatcher", "hit__return": "uretprobe_dispatcher"}
    assert all(dispatchers[event.event] in (event.stack or ()) for event in decoded)


def test_an_event_the_decoder_cannot_print_is_read_from_the_text_and_the_reader_says_why_once(top):
    instance = Instance(top)
    instance.create()
    updates: list[StreamUpdate] = []
    try:
        # sched_switch prints its prev_state with __print_flags, which the decoder does not render
        reader = StreamReader(instance, EventStore(100), updates.append, interval=0.02,
                              events=[("sched", "sched_switch")])
        assert isinstance(reader.source, TracePipeSource)
        assert reader.notice.startswith("event sched/sched_switch is read from the text trace_pipe: ")
        reader.start()
        time.sleep(0.3)
        reader.stop()
        instance.set_option("context-info", False)  # the kernel then prints no comm, pid, CPU, flags or time
        bare = StreamReader(instance, EventStore(100), updates.append, events=[(lifetime.run_name(), "none")])
        assert isinstance(bare.source, TracePipeSource)
        assert bare.notice == "option context-info off: the text trace_pipe is read, as the kernel prints it"
        instance.set_option("context-info", True)
        instance.set_option("userstacktrace", True)
        stacks = StreamReader(instance, EventStore(100), updates.append, events=[(lifetime.run_name(), "none")])
        assert isinstance(stacks.source, TracePipeSource)
        assert stacks.notice == "user stack traces are read from the text trace_pipe"
    finally:
        instance.remove()
    notices = [update.notice for update in updates if update.notice]
    assert notices == [reader.notice]  # in the first update only


def test_columns_follow_the_instances_options_as_the_text_does(top, boxlab):
    """irq-info off (a new instance takes the top level's options; after other tests the 6.1 guest's had it off):
    the text has no flags column; record-tgid off: no tgid column."""
    printed, decoded, *_ = recorded_then_read(top, boxlab, 50, options={"irq-info": False, "record-tgid": False})
    assert {event.flags for event in printed} == {""} and {event.tgid for event in printed} == {None}
    assert as_printed(decoded) == printed


EXEC_SOURCE = r"""
#include <stdio.h>
#include <unistd.h>
__attribute__((noinline)) int hit(int n) { asm volatile("" ::: "memory"); return n + 1; }

int main(int argc, char **argv)
{
    char line[8];
    hit(argc);
    if (!fgets(line, sizeof line, stdin))  /* blocked: switched out, so saved_cmdlines holds this name */
        return 1;
    if (argc > 1)
        execv(argv[1], argv + 1);
    return 0;
}
"""


def blocked_as(pid: int, comm: str) -> bool:
    """The process is asleep (on its stdin) under this name."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return Path(f"/proc/{pid}/comm").read_text().strip() == comm and stat.rpartition(")")[2].split()[0] == "S"


def test_a_pid_is_named_as_the_text_names_it_when_read_after_an_exec_and_after_an_exit(top, tmp_path):
    """The names the text prints when the records are read: a process that exec'd since its first records (its
    pid read a moment before under its old name), then one that has exited."""
    (tmp_path / "execlab.c").write_text(EXEC_SOURCE)
    first, second = tmp_path / "execlab_a", tmp_path / "execlab_b"
    subprocess.run(["gcc", "-O1", "-o", str(first), str(tmp_path / "execlab.c")], check=True)
    os.link(first, second)  # the same inode, so the same probe, under another name
    events = Events(top)
    probe = compile_spec(parse_spec(["hit"], binary=str(first)), lifetime.run_name())[0]
    instance = Instance(top)
    instance.create(None, {"record-tgid": True})
    created = []
    try:
        created = events.create([probe], run_scoped=True)
        instance.enable(probe.group, probe.event)
        source = StreamReader(instance, None, lambda update: None, events=[(probe.group, probe.event)]).source
        assert isinstance(source, RawPagesSource)
        source.open()
        run = subprocess.Popen([str(first), str(second)], stdin=subprocess.PIPE)
        try:
            wait_for(lambda: blocked_as(run.pid, "execlab_a"), "the first name, asleep")
            before = source.read(time.monotonic() + 1).events
            assert run.stdin is not None
            run.stdin.write(b"\n")
            run.stdin.flush()
            wait_for(lambda: blocked_as(run.pid, "execlab_b"), "the name after the exec, asleep")
            comm = kernel_comm(top.read("saved_cmdlines"))
            after_exec = source.read(time.monotonic() + 1).events
            run.stdin.write(b"\n")
            run.stdin.flush()
            assert run.wait(10) == 0
        finally:
            run.kill()
        short = subprocess.run([str(first)], input=b"\n")  # runs and exits before it is read
        assert short.returncode == 0
        after_exit = source.read(time.monotonic() + 1).events
        source.close()
        comm_after_exit = kernel_comm(top.read("saved_cmdlines"))
    finally:
        instance.remove()
        for event in created:
            events.delete(event)
    assert [event.comm for event in before] == ["execlab_a"]
    assert comm(run.pid) == "execlab_b"  # what the text prints now
    assert [(event.pid, event.comm) for event in after_exec] == [(run.pid, "execlab_b")]
    assert [event.comm for event in after_exit] == [comm_after_exit(after_exit[0].pid)] == ["execlab_a"]


def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.01)


@pytest.mark.parametrize(("chosen", "source"), [("", RawPagesSource), ("text", TracePipeSource)])
def test_a_tail_reads_the_binary_pages_unless_the_text_is_asked_for(top, monkeypatch, chosen, source):
    monkeypatch.setenv("KPROBE_TUI_READER", chosen)
    session = TailSession(top, ["sched/sched_process_exec"])
    session.start(lambda update: None)
    try:
        assert session.reader is not None and isinstance(session.reader.source, source)
    finally:
        session.stop()
