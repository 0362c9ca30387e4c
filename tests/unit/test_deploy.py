"""deploy/kprobe-tui-export.service: systemd reads it without a complaint, and it says what export does
(a SIGTERM stop removes the probes, cleanup mends a SIGKILL, a UserError's exit 2 is not restarted)."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[2]
UNIT = PROJECT / "deploy" / "kprobe-tui-export.service"
INSTALLED = "/usr/local/bin/kprobe-tui"  # where the unit expects the command


def service() -> configparser.SectionProxy:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]  # systemd's keys are case-sensitive
    unit.read_string(UNIT.read_text())
    return unit["Service"]


def test_systemd_reads_the_unit_without_a_warning(tmp_path):
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed (Debian: systemd)")
    command = Path(sys.executable).with_name("kprobe-tui")  # this checkout's, as pip install -e made it
    unit = tmp_path / UNIT.name
    unit.write_text(UNIT.read_text().replace(INSTALLED, str(command)))
    checked = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0 and checked.stderr == "", checked.stderr


def test_the_unit_stops_by_sigterm_cleans_up_and_does_not_restart_a_bad_config():
    unit = service()
    assert unit["ExecStart"].startswith(f"{INSTALLED} export ") and "--listen 127.0.0.1:" in unit["ExecStart"]
    assert unit["KillSignal"] == "SIGTERM" and unit["ExecStopPost"] == f"{INSTALLED} cleanup"
    assert unit["RestartPreventExitStatus"] == "2"  # cli.py's exit for a UserError: a bad CONFIG stays bad
