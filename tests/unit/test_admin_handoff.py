"""Lab mode's hand-off: the lines given to an administrator do what they say when a shell runs them."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

from kprobe_tui.probes.rawfetch import compile_raw
from kprobe_tui.probes.render import admin_handoff, perf_command
from kprobe_tui.probes.spec import parse_spec


def run_as_admin(line: str, shim: Path) -> None:
    """What the administrator's shell does with ``line``; ``sudo`` is a shim that runs its command."""
    shim.mkdir(exist_ok=True)
    sudo = shim / "sudo"
    sudo.write_text('#!/bin/sh\nexec "$@"\n')
    sudo.chmod(0o755)
    subprocess.run(["sh", "-c", line], check=True, env={**os.environ, "PATH": f"{shim}:{os.environ['PATH']}"})


def test_handoff_lines_run_in_a_shell_write_exactly_the_definition_and_filter(tmp_path):
    spec = parse_spec(["vfs_read%return", "$retval:s64", "$comm"], group="kprobe_tui", filter='retval > 0 && comm == "cat"')
    probe = compile_raw(spec, "kprobe_tui")
    lines = admin_handoff(spec, [probe], "student", str(tmp_path))
    assert f"sudo {perf_command(spec, probe.group, probe.event)}" in lines
    writes = [line for line in lines if "| sudo sh -c" in line]
    assert len(writes) == 2
    (tmp_path / "events/kprobe_tui/vfs_read__return").mkdir(parents=True)
    for line in writes:  # $retval and the quotes survive the shell
        run_as_admin(line, tmp_path / "bin")
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
    assert f"echo '{probe.definition()}' | sudo sh -c 'cat >> /sys/kernel/tracing/uprobe_events'" in lines


def test_every_handoff_line_parses_back_to_its_words(tmp_path):
    """Quotes in the filter and backslashes in a raw fetch-arg are data: each line splits into exactly
    the words meant, and the written files hold exactly the definition and the filter."""
    spec = parse_spec(["vfs_read", "imm=\\1234", "flag=\\\"it's\""], group="kprobe_tui",
                      filter="comm == 'bash' && imm != 0")
    probe = compile_raw(spec, "kprobe_tui")
    lines = admin_handoff(spec, [probe], "student", str(tmp_path))
    writes = [line for line in lines if "| sudo sh -c" in line]
    definition_file, filter_file = (str(tmp_path / "kprobe_events"),
                                    str(tmp_path / "events/kprobe_tui/vfs_read/filter"))
    assert [shlex.split(line) for line in writes] == [
        ["printf", "%s\\n", probe.definition(), "|", "sudo", "sh", "-c", f"cat >> {definition_file}"],
        ["echo", spec.filter, "|", "sudo", "sh", "-c", f"cat > {filter_file}"],
    ]
    (tmp_path / "events/kprobe_tui/vfs_read").mkdir(parents=True)
    for line in writes:
        run_as_admin(line, tmp_path / "bin")
    assert (tmp_path / "kprobe_events").read_text() == probe.definition() + "\n"
    assert Path(filter_file).read_text() == spec.filter + "\n"
