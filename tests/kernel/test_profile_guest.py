"""kprobe_profile on a real kernel: the counts the probes panel shows, read through the profile core."""

from __future__ import annotations

import pytest
from guestlib import trigger_open

from kprobe_tui.kernel.profile import parse_kprobe_profile, read_hits

pytestmark = pytest.mark.kernel

GROUP = "kptui_profile"
OTHER = "kptui_profile2"


def test_kprobe_hits_are_counted_per_group_though_the_file_names_no_group(tracefs, tmp_path):
    """Two probes of one name in two groups: only the enabled one counts the opens."""
    marker = tmp_path / "kptui-profile-marker"
    marker.write_text("x\n")
    tracefs.write("kprobe_events", f"p:{GROUP}/open do_sys_openat2\n")
    tracefs.write("kprobe_events", f"p:{OTHER}/open do_sys_openat2\n")
    try:
        raw = tracefs.read("kprobe_profile")
        assert [(e.event, e.hits, e.misses) for e in parse_kprobe_profile(raw) if e.event == "open"] == [
            ("open", 0, 0), ("open", 0, 0)]
        tracefs.write(f"events/{OTHER}/open/enable", "1", append=False)
        for _ in range(5):
            trigger_open(marker)
        tracefs.write(f"events/{OTHER}/open/enable", "0", append=False)
        hits = read_hits(tracefs)
        assert hits[f"{GROUP}/open"].hits == 0
        assert hits[f"{OTHER}/open"].hits >= 5
        assert hits[f"{OTHER}/open"].misses == 0
    finally:
        tracefs.write("kprobe_events", f"-:{GROUP}/open\n")
        tracefs.write("kprobe_events", f"-:{OTHER}/open\n")
