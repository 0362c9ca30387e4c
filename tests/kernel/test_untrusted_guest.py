"""What the kernel takes, measured on kprobes in each guest (issue 15, item 18): names of 63 characters
and not 64, lines of 4094 bytes and not 4095, and a filter's refusal in the kernel's own words even
when error_log's newest entry is someone else's."""

from __future__ import annotations

import os

import pytest

from kprobe_tui.cli import main as cli_main
from kprobe_tui.kernel.events import Events
from kprobe_tui.kernel.tracefs import KernelRefused

pytestmark = pytest.mark.kernel

GROUP = "guestnames"


@pytest.fixture
def group(tracefs):
    yield GROUP
    Events(tracefs).delete_group(GROUP)


def test_names_of_63_characters_are_taken_and_64_refused(tracefs, group, capsys):
    for name_group, event in ((f"g{'x' * 62}", "ev"), (GROUP, "e" * 63)):
        tracefs.write("kprobe_events", f"p:{name_group}/{event} do_sys_openat2\n")
        tracefs.write("kprobe_events", f"-:{name_group}/{event}\n")
    for name_group, event, words in ((f"g{'x' * 63}", "ev", "Group name is too long"),
                                     (GROUP, "e" * 64, "Event name is too long")):
        with pytest.raises(KernelRefused) as refused:
            tracefs.write("kprobe_events", f"p:{name_group}/{event} do_sys_openat2\n")
        assert refused.value.log is not None and refused.value.log.message == words
    # the CLI in this process: a Python start costs seconds under TCG
    assert cli_main(["probe", "-n", "-g", GROUP, f"{'e' * 64}=do_sys_openat2"]) == 234  # perf probe's -EINVAL
    assert "64 characters, the kernel takes at most 63" in capsys.readouterr().err


def test_lines_of_4094_bytes_are_taken_and_4095_refused(tracefs, group):
    def line(length: int) -> str:
        """A definition of exactly ``length`` bytes: fetch-args of at most 60 characters (the kernel takes 63)."""
        text, index = f"p:{GROUP}/long do_sys_openat2", 0
        while True:
            name, remaining = f" a{index:03d}=", length - len(text)
            if remaining <= len(name) + 60:
                return text + name + "+0x" + "0" * (remaining - len(name) - 8) + "(%di)"
            size = 60 if remaining > len(name) * 2 + 60 + 16 else remaining - len(name) - 30
            text += name + "+0x" + "0" * (size - 8) + "(%di)"
            index += 1

    tracefs.write("kprobe_events", line(4094) + "\n")
    tracefs.write("kprobe_events", f"-:{GROUP}/long\n")
    fd = os.open(tracefs.path("kprobe_events"), os.O_WRONLY | os.O_APPEND)
    try:
        with pytest.raises(OSError):  # the kernel's EINVAL: "Line length is too long" is in dmesg only
            os.write(fd, (line(4095) + "\n").encode())
    finally:
        os.close(fd)
    with pytest.raises(KernelRefused, match="a line of 4095 bytes .* at most 4094"):
        tracefs.write("kprobe_events", line(4095) + "\n")


def test_a_filter_refusal_is_the_kernels_words_for_that_filter(tracefs, group, capsys):
    with pytest.raises(KernelRefused):  # an earlier, different refusal: the newest entry until ours
        tracefs.write("kprobe_events", f"p:{GROUP}/stale do_sys_openat2 x=%nosuchreg\n")
    # a filter our own check takes (it refuses "dfd == 1 dfd == 2" before the kernel) and the kernel refuses
    assert cli_main(["probe", "-g", GROUP, "--event-filter", "comm == 1", "do_sys_openat2", "dfd=%di:s32"]) == 234
    err = capsys.readouterr().err
    assert "Expecting string field" in err and "register" not in err
    assert f"{GROUP}/" not in tracefs.read("kprobe_events")  # the probe went with its refused filter
