"""Real kprobes, kretprobes and fprobes through the CLI: created, tailed with correct values, filtered, deleted."""

from __future__ import annotations

import os
import signal

import pytest
from guestlib import Tail, run_cli, trigger_open

from kprobe_tui.kernel.events import Events

pytestmark = pytest.mark.kernel

GROUP = "guesttest"
IS_612 = os.uname().release.startswith("6.12.")


@pytest.fixture
def group(tracefs):
    """Our test group; whatever a failing test left in it is removed (the tracefs fixture then checks)."""
    yield GROUP
    Events(tracefs).delete_group(GROUP)


@pytest.fixture
def marker(tmp_path):
    """A file whose unique path the probes must report when `cat` opens it."""
    path = tmp_path / "kptui-opened-this"
    path.write_text("x\n")
    return path


def _probe(*args: str) -> str:
    result = run_cli("probe", "--explain", "-g", GROUP, *args)  # --explain: the tracefs lines on stdout
    assert result.returncode == 0, result.stderr
    return result.stdout


def _delete(*names: str) -> None:
    result = run_cli("del", *(f"{GROUP}/{name}" for name in names))
    assert result.returncode == 0, result.stderr
    for name in names:
        assert f"removed {GROUP}/{name}" in result.stdout


def _opened(path):
    return lambda event: event["args"].get("fname") == str(path)


def _opened_here(path):
    """The event of this test process opening ``path``."""
    return lambda event: event["args"].get("fname") == str(path) and event["pid"] == os.getpid()


def test_kprobe_with_register_args_reports_the_opened_file(tracefs, group, marker):
    out = _probe("open=do_sys_openat2", "dfd=%di:s32", "fname=+0(%si):ustring")
    assert f"p:{GROUP}/open do_sys_openat2+0 dfd=%di:s32 fname=+0(%si):ustring" in out
    assert f"p:{GROUP}/open do_sys_openat2" in tracefs.read("kprobe_events")
    tail = Tail(tracefs.root, [f"{GROUP}/open"])
    try:
        tail.ready()
        trigger_open(marker)
        event = tail.wait_for(_opened(marker))[-1]
    finally:
        status = tail.stop(signal.SIGTERM)
    assert event["event"] == "open" and event["args"]["dfd"] == -100  # AT_FDCWD
    assert status == -signal.SIGTERM  # cleaned up, then died of the signal as the shell expects
    assert not tail.instance.exists(), "tail left its instance after SIGTERM"
    _delete("open")


def test_kretprobe_reports_the_error_returned_to_cat(tracefs, group, tmp_path):
    # $comm is read at probe time: the header's comm can be "<...>" for a process that exited quickly.
    _probe("open_ret=do_sys_openat2%return", "ret=$retval:s64", "comm=$comm")
    tail = Tail(tracefs.root, [f"{GROUP}/open_ret"])
    try:
        tail.ready()
        trigger_open(tmp_path / "no-such-file", must_exist=False)
        event = tail.wait_for(lambda e: e["args"].get("comm") == "cat" and e["args"].get("ret") == -2)[-1]  # -ENOENT
    finally:
        status = tail.stop(signal.SIGHUP)
    assert event["event"] == "open_ret"
    assert status == -signal.SIGHUP
    assert not tail.instance.exists(), "tail left its instance after SIGHUP"
    _delete("open_ret")


def test_kprobe_with_btf_argument_names(tracefs, group, marker):
    out = _probe("named=do_sys_openat2", "fname=filename:ustring")
    definition = next(line for line in tracefs.read("kprobe_events").splitlines() if f"{GROUP}/named" in line)
    if IS_612:  # the kernel resolves the name from BTF itself
        assert "fname=filename:ustring" in definition, out
    else:  # compiled to the register the x86-64 ABI passes the 2nd argument in
        assert "fname=+0(%si):ustring" in definition, out
    tail = Tail(tracefs.root, [f"{GROUP}/named"])
    try:
        tail.ready()
        trigger_open(marker)
        tail.wait_for(_opened(marker))
    finally:
        tail.stop()
    _delete("named")


def test_fprobe_entry_and_exit(tracefs, group, marker):
    if "f[:[<group>/][<event>]]" not in tracefs.read("README"):
        assert not IS_612, "Debian's 6.12 has fprobe events"
        pytest.skip(f"{os.uname().release} is built without CONFIG_FPROBE_EVENTS")
    out = _probe("--fprobe", "fp=do_sys_openat2", "fname=filename:ustring")
    assert f"f:{GROUP}/fp do_sys_openat2 fname=filename:ustring" in out  # the kernel resolves the BTF name
    _probe("--fprobe", "fp_ret=do_sys_openat2%return", "ret=$retval:s64")
    lines = tracefs.read("dynamic_events").splitlines()
    assert any(line.startswith(f"f:{GROUP}/fp do_sys_openat2 ") for line in lines), lines
    assert any(line.startswith(f"f:{GROUP}/fp_ret do_sys_openat2%return ") for line in lines), lines
    tail = Tail(tracefs.root, [f"{GROUP}/fp", f"{GROUP}/fp_ret"])
    try:
        tail.ready()
        trigger_open(marker)
        seen = tail.wait_for(_opened(marker))
        pid = seen[-1]["pid"]
        tail.wait_for(lambda e: e["event"] == "fp_ret" and e["pid"] == pid and e["args"]["ret"] >= 3)
    finally:
        tail.stop()
    _delete("fp", "fp_ret")


def test_kernel_side_filter_passes_only_matching_events(tracefs, group, marker, tmp_path):
    _probe("open=do_sys_openat2", "fname=+0(%si):ustring")
    other = tmp_path / "other-file"
    other.write_text("y\n")
    tail = Tail(tracefs.root, [f"{GROUP}/open"], "--filter", f'fname == "{marker}"')
    try:
        tail.ready()
        # The filter is in the kernel: our instance's event filter, not only the view.
        kernel_filter = (tail.instance / "events" / GROUP / "open" / "filter").read_text()
        assert str(marker) in kernel_filter, kernel_filter
        trigger_open(other)
        trigger_open(marker)
        seen = tail.wait_for(_opened(marker))
        # Every open by cat, python and the rest fired the probe; the kernel recorded only the match.
        recorded = tail.recorded_events()
    finally:
        tail.stop()
    assert [event["args"]["fname"] for event in seen] == [str(marker)]
    assert recorded == 1
    _delete("open")


# x86-64's kernel-side O_LARGEFILE: open() adds it on 64-bit (force_o_largefile); userspace headers define it as 0.
KERNEL_O_LARGEFILE = 0o100000


def test_struct_member_through_btf_reads_the_open_flags(tracefs, group, marker):
    _probe("how=do_sys_openat2", "flags=how->flags:x64", "fname=filename:ustring")
    definition = next(line for line in tracefs.read("kprobe_events").splitlines() if f"{GROUP}/how " in line)
    # 6.12 takes the C member path itself; on 6.1 kprobe-tui compiles it from BTF to an offset from %dx.
    assert ("flags=how->flags:x64" if IS_612 else "flags=+0(%dx):x64") in definition
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    tail = Tail(tracefs.root, [f"{GROUP}/how"])
    try:
        tail.ready()
        os.close(os.open(marker, os.O_RDONLY | os.O_NOFOLLOW))  # Python adds O_CLOEXEC
        event = tail.wait_for(lambda e: e["args"].get("fname") == str(marker) and e["pid"] == os.getpid())[-1]
    finally:
        tail.stop()
    assert event["args"]["flags"] == flags | KERNEL_O_LARGEFILE
    _delete("how")


def test_filter_given_to_probe_holds_when_tailed(tracefs, group, marker):
    """A filter set with the probe (top-level event) also holds in tail's own instance."""
    _probe("--event-filter", f'fname == "{marker}"', "open=do_sys_openat2", "fname=+0(%si):ustring")
    tail = Tail(tracefs.root, [f"{GROUP}/open"])
    try:
        tail.ready()
        trigger_open(marker)
        tail.wait_for(_opened(marker))
        recorded = tail.recorded_events()
    finally:
        tail.stop()
    assert recorded == 1
    _delete("open")


def test_tail_does_not_report_its_own_activity(tracefs, group, marker):
    _probe("open=do_sys_openat2", "fname=+0(%si):ustring")
    tail = Tail(tracefs.root, [f"{GROUP}/open"])
    try:
        tail.ready()
        trigger_open(marker)
        seen = tail.wait_for(_opened(marker))
        # The reader had opened trace_pipe to deliver that event: its own open, if reported, precedes this one.
        trigger_open(marker)
        seen += tail.wait_for(_opened(marker))
    finally:
        tail.stop()
    _delete("open")
    # Its reader is a thread: the event's pid is the thread's, the tgid (record-tgid) the process's.
    own = [event["args"]["fname"] for event in seen if tail.proc.pid in (event["pid"], event["tgid"])]
    assert own == []


def test_kretprobe_reads_the_opened_name_at_exit_where_the_kernel_saves_arguments(tracefs, group, marker, tmp_path):
    """6.12 keeps entry arguments for return probes: the name opened comes back with what open returned.

    6.1 does not: the same command is refused before anything reaches the kernel (reading %si at
    exit would report whatever the function left in it).
    """
    words = ("open_exit=do_sys_openat2%return", "fname=filename:ustring", "ret=$retval")
    if not IS_612:
        result = run_cli("probe", "-g", GROUP, *words)
        assert result.returncode == 254 and "Traceback" not in result.stderr, result.stderr  # perf's -ENOENT
        assert "'fname=filename:ustring': this kernel cannot read arguments at function exit" in result.stderr
        assert "probe the entry too: kprobe-tui probe 'do_sys_openat2' 'fname=filename:ustring'" in result.stderr
        assert f"{GROUP}/" not in tracefs.read("kprobe_events")
        return
    # also as kprobe-tui compiles a member or a parameter from DWARF: memory at the saved argument
    out = _probe(*words, "by_number=+0($arg2):ustring")
    definition = next(line for line in tracefs.read("kprobe_events").splitlines() if f"{GROUP}/open_exit " in line)
    assert f"{GROUP}/open_exit do_sys_openat2 fname=filename:ustring" in definition, out  # the kernel resolves the name
    missing = tmp_path / "no-such-file"
    tail = Tail(tracefs.root, [f"{GROUP}/open_exit"])
    try:
        tail.ready()
        fd = os.open(marker, os.O_RDONLY)
        os.close(fd)
        opened = tail.wait_for(_opened_here(marker))[-1]
        with pytest.raises(FileNotFoundError):
            os.open(missing, os.O_RDONLY)
        failed = tail.wait_for(_opened_here(missing))[-1]
    finally:
        tail.stop()
    assert opened["args"]["ret"] == fd and opened["args"]["by_number"] == str(marker)
    assert failed["args"]["ret"] == -2  # -ENOENT, with the name it was asked for
    _delete("open_exit")
