"""The binary source keeps a kernel stack with its event across reads, on pages built by hand in a tracefs tree of files.

The kernel commits a stack as a record of its own just after its event's; a read may come between the two while
another CPU's event, later in time, was read with them. A regular file read page by page stands in for each CPU's
``trace_pipe_raw``; the stack's page is written to it after the first read, as the kernel commits it then.
"""

from __future__ import annotations

import struct

from kprobe_tui.kernel.instance import Instance
from kprobe_tui.kernel.tracefs import Tracefs
from kprobe_tui.stream.ksyms import KernelSymbols
from kprobe_tui.stream.rawformat import compile_format
from kprobe_tui.stream.reader import RawPagesSource
from tests.unit.test_rawpage_walk import HEADER_PAGE, data, page

COMMON = (
    "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
    "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
    "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
    "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n"
)
HIT = "name: hit\nID: 100\nformat:\n" + COMMON + '\tfield:u32 x;\toffset:8;\tsize:4;\tsigned:0;\n\nprint fmt: "x=%u", REC->x\n'
KERNEL_STACK = ("name: kernel_stack\nID: 4\nformat:\n" + COMMON + "\tfield:int size;\toffset:8;\tsize:4;\tsigned:1;\n"
                "\tfield:unsigned long caller[8];\toffset:16;\tsize:64;\tsigned:0;\n\n"
                'print fmt: "\\t=> %ps\\n", (void *)REC->caller[0]\n')
PID = 2**31 - 2  # no such process: its name comes from saved_cmdlines


def hit(cpu: int) -> bytes:
    return struct.pack("<HBBiI", 100, 0, 0, PID, cpu)


def stack(*addresses: int) -> bytes:
    return struct.pack(f"<HBBii4x{len(addresses)}Q", 4, 0, 0, PID, len(addresses) * 8, *addresses)


def test_a_stack_read_after_another_cpus_later_event_still_goes_to_its_event(tmp_path):
    (tmp_path / "events/ftrace/kernel_stack").mkdir(parents=True)
    (tmp_path / "events/header_page").write_text(HEADER_PAGE)
    (tmp_path / "events/ftrace/kernel_stack/format").write_text(KERNEL_STACK)
    (tmp_path / "saved_cmdlines").write_text(f"{PID} boxlab\n")
    (tmp_path / "kallsyms").write_text("ffffffff81000000 T uprobe_dispatcher\nffffffff81000100 T handler_chain\n")
    instance_dir = tmp_path / "instances/kptui_test"
    for cpu, ts in ((0, 1000), (1, 2000)):  # cpu0's event, then cpu1's
        (instance_dir / f"per_cpu/cpu{cpu}").mkdir(parents=True)
        (instance_dir / f"per_cpu/cpu{cpu}/trace_pipe_raw").write_bytes(page(ts, data(0, hit(cpu))))
    (instance_dir / "options").mkdir()
    for option, on in (("stacktrace", "1"), ("irq-info", "1"), ("record-tgid", "0")):
        (instance_dir / f"options/{option}").write_text(on + "\n")
    (instance_dir / "buffer_subbuf_size_kb").write_text("4\n")
    decoder = compile_format(HIT)
    source = RawPagesSource(Instance(Tracefs(tmp_path), name="kptui_test"), {decoder.id: decoder},
                            KernelSymbols(str(tmp_path / "kallsyms")))
    source.open()
    handed = list(source.read(0.0).events)
    with open(instance_dir / "per_cpu/cpu0/trace_pipe_raw", "ab") as cpu0:  # cpu0's stack is committed now
        cpu0.write(page(1500, data(0, stack(0xFFFFFFFF81000010, 0xFFFFFFFF81000104))))
    handed += source.read(0.0).events
    handed += source.read(0.0).events + source.flush()
    source.close()
    assert [(event.cpu, event.comm, event.stack) for event in handed] == [
        (0, "boxlab", ("uprobe_dispatcher", "handler_chain")), (1, "boxlab", None)]
