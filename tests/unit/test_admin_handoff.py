"""Lab mode's hand-off: the lines given to an administrator do what they say when a shell runs them."""

from __future__ import annotations

import subprocess

from kprobe_tui.probes.compile import compile_raw
from kprobe_tui.probes.render import admin_handoff, perf_command
from kprobe_tui.probes.spec import parse_spec


def test_handoff_lines_run_in_a_shell_write_exactly_the_definition_and_filter(tmp_path):
    spec = parse_spec(["vfs_read%return", "$retval:s64", "$comm"], group="kprobe_tui", filter='retval > 0 && comm == "cat"')
    probe = compile_raw(spec, "kprobe_tui")
    lines = admin_handoff(spec, [probe], "student", str(tmp_path))
    assert f"sudo {perf_command(spec, probe.group, probe.event)}" in lines
    writes = [line for line in lines if line.startswith("sudo sh -c")]
    assert len(writes) == 2
    (tmp_path / "events/kprobe_tui/vfs_read__return").mkdir(parents=True)
    for line in writes:  # what the administrator's shell does, minus sudo: $retval and the quotes survive
        subprocess.run(["sh", "-c", line.removeprefix("sudo ")], check=True)
    assert (tmp_path / "kprobe_events").read_text() == probe.definition() + "\n"
    assert (tmp_path / "events/kprobe_tui/vfs_read__return/filter").read_text() == spec.filter + "\n"
    assert "$retval" in probe.definition()
    once = "\n".join(lines[lines.index(next(line for line in lines if line.startswith("# once"))):])
    assert "usermod -aG perf student" in once
    assert f"chgrp -R perf {tmp_path}" in once and f"chmod -R g+rwX {tmp_path}" in once


def test_handoff_for_a_uprobe_names_the_binary_and_uprobe_events(tmp_path):
    source = tmp_path / "main.c"
    source.write_text("int main(void) { return 0; }\n")
    binary = tmp_path / "prog"
    subprocess.run(["gcc", "-O0", "-o", str(binary), str(source)], check=True)
    spec = parse_spec(["main"], binary=str(binary), group="kprobe_tui")
    probe = compile_raw(spec, "kprobe_tui")
    lines = admin_handoff(spec, [probe], "u")
    assert f"sudo perf probe -x {binary} -a kprobe_tui:main=main" in lines
    assert f"sudo sh -c \"echo '{probe.definition()}' >> /sys/kernel/tracing/uprobe_events\"" in lines
