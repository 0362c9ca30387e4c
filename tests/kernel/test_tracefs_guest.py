"""Raw kprobe definitions through ``Tracefs``: the layer every other kernel module writes through."""

from __future__ import annotations

import re

import pytest

from kprobe_tui.kernel.tracefs import KernelRefused

pytestmark = pytest.mark.kernel

GROUP = "kptui_guest"


def test_kprobe_and_kretprobe_are_defined_and_deleted(tracefs):
    tracefs.write("kprobe_events", f"p:{GROUP}/open do_sys_openat2 dfd=%di\n")
    tracefs.write("kprobe_events", f"r:{GROUP}/open_ret do_sys_openat2 ret=$retval\n")
    try:
        lines = tracefs.read("kprobe_events").splitlines()
        assert f"p:{GROUP}/open do_sys_openat2 dfd=%di" in lines
        # The kernel shows a kretprobe's maxactive (r<N>:), which depends on the CPU count.
        assert any(re.fullmatch(rf"r\d*:{GROUP}/open_ret do_sys_openat2 ret=\$retval", line) for line in lines)
        assert re.search(r"field:\w+ dfd;", tracefs.read(f"events/{GROUP}/open/format"))
    finally:
        tracefs.write("kprobe_events", f"-:{GROUP}/open\n")
        tracefs.write("kprobe_events", f"-:{GROUP}/open_ret\n")
    assert not tracefs.exists(f"events/{GROUP}")


def test_refusal_carries_the_kernel_error_log_with_caret(tracefs):
    definition = f"p:{GROUP}/bad do_sys_openat2 x=%nosuchreg"
    with pytest.raises(KernelRefused) as refused:
        tracefs.write("kprobe_events", definition + "\n")
    log = refused.value.log
    assert log is not None and log.source == "trace_kprobe"
    assert log.message == "Invalid register name"
    assert log.command == definition
    assert definition[log.caret :].startswith("%nosuchreg")
