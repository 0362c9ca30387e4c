"""The kernel's error_log, parsed from real captures, and refusals surfaced with the caret."""

from __future__ import annotations

from pathlib import Path

import pytest

from kprobe_tui.errors import UserError
from kprobe_tui.kernel.tracefs import KernelRefused, Tracefs, parse_error_log

FIXTURES = Path(__file__).parents[1] / "fixtures"


def test_last_entry_of_a_real_error_log():
    entry = parse_error_log((FIXTURES / "captured" / "error_log-uprobe-6.18").read_text())
    assert entry.source == "trace_uprobe"
    assert entry.message == "$arg* can be used only on function entry or exit"
    assert entry.command.startswith("p:kptui_10584/add3 /tmp/basic:0x11e0")
    assert entry.command[entry.caret :].startswith("$arg1 arg2=")
    rendered = entry.render().splitlines()
    assert rendered[2].index("^") == rendered[1].index("$arg1 arg2=")


def test_empty_or_garbage_error_log_has_no_entry():
    assert parse_error_log("") is None
    assert parse_error_log("garbage\n  ^\n") is None


def test_reading_a_missing_file_names_it(tmp_path):
    with pytest.raises(UserError) as caught:
        Tracefs(tmp_path).read("kprobe_events")
    assert str(tmp_path / "kprobe_events") in caught.value.message
    assert "does not provide" in caught.value.hint


def test_a_snapshot_is_read_only(tmp_path):
    (tmp_path / "uprobe_events").write_text("")
    with pytest.raises(UserError, match="read-only"):
        Tracefs(tmp_path, writable=False).write("uprobe_events", "p:x/y /bin/true:0x0")


@pytest.mark.live
def test_kernel_refusal_points_at_the_bad_token(tracefs_root):
    tracefs = Tracefs(tracefs_root)
    before = tracefs.read("uprobe_events")
    command = "p:kptui_selftest/bad /bin/true:0x0 a=%zz"
    with pytest.raises(KernelRefused) as caught:
        tracefs.write("uprobe_events", command)
    log = caught.value.log
    assert log is not None and log.message == "Invalid register name"
    assert log.command == command
    assert command[log.caret :] == "%zz"
    assert tracefs.read("uprobe_events") == before


def test_what_is_on_and_filtered_is_read_through_events(tmp_path):
    """The probes panel asks Events (set_event of a buffer, an event's filter), never the files themselves."""
    from kprobe_tui.kernel.events import Events

    (tmp_path / "set_event").write_text("g:a\nkptui_1:b\n")
    (tmp_path / "instances" / "run").mkdir(parents=True)
    (tmp_path / "instances" / "run" / "set_event").write_text("g:a\n")
    (tmp_path / "events" / "g" / "a").mkdir(parents=True)
    (tmp_path / "events" / "g" / "a" / "filter").write_text("none\n")
    (tmp_path / "events" / "g" / "b").mkdir(parents=True)
    (tmp_path / "events" / "g" / "b" / "filter").write_text("common_pid != 7\n")
    events = Events(Tracefs(tmp_path))
    assert events.enabled_names() == {"g/a", "kptui_1/b"}
    assert events.enabled_names("run") == {"g/a"}
    assert events.enabled_names("gone") == set()
    assert (events.filter_of("g", "a"), events.filter_of("g", "b"), events.filter_of("g", "c")) == ("", "common_pid != 7", "")
