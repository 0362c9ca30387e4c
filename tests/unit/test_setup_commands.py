"""The README's commands, .ci/run and requires-python agree on one interpreter: Debian's /usr/bin/python3.

A python3 earlier on PATH (pyenv's 3.11.7 on our machines) hid that Debian 12's 3.11.2 has no tar
extraction filters: every snapshot failed for users while the suite passed."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

PROJECT = Path(__file__).parents[2]
DEBIAN_PYTHON = Path("/usr/bin/python3")


def readme_block(marker: str) -> str:
    text = (PROJECT / "README.md").read_text()
    return re.search(rf"<!-- {marker} -->\n```sh\n(.*?)\n```", text, re.S)[1]


@pytest.mark.parametrize("marker", ["run-command", "test-command"])
def test_readme_commands_create_the_venv_with_debians_python(marker):
    command = readme_block(marker)
    assert "/usr/bin/python3 -m venv" in command
    assert not re.search(r"(?<![/\w])python3 -m venv", command), "a bare python3 is whatever PATH finds first"


def test_ci_refuses_a_test_command_on_another_interpreter(tmp_path):
    """.ci/run checks the README line before running it (a copy of the project whose line uses a bare
    python3, and would only echo were it run)."""
    (tmp_path / ".ci").mkdir()
    (tmp_path / ".ci" / "run").write_text((PROJECT / ".ci" / "run").read_text())
    readme = (PROJECT / "README.md").read_text().replace(readme_block("test-command"), "echo python3 -m venv .venv")
    (tmp_path / "README.md").write_text(readme)
    result = subprocess.run(["bash", str(tmp_path / ".ci" / "run")], capture_output=True, text=True, timeout=30)
    assert result.returncode == 1 and "must create the venv with /usr/bin/python3" in result.stderr


def test_requires_python_claims_what_is_tested():
    """The lower bound is Debian's interpreter's version: nothing older is tested, so nothing older is claimed."""
    if not DEBIAN_PYTHON.exists():
        pytest.skip("not a Debian machine")
    claimed = tomllib.loads((PROJECT / "pyproject.toml").read_text())["project"]["requires-python"]
    debian = subprocess.run([str(DEBIAN_PYTHON), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                            capture_output=True, text=True, check=True).stdout.strip()
    assert claimed == f">={debian}"


def test_the_suite_runs_on_debians_python():
    if not DEBIAN_PYTHON.exists():
        pytest.skip("not a Debian machine")
    assert Path(sys._base_executable).resolve() == DEBIAN_PYTHON.resolve(), (
        f"this suite runs on {sys._base_executable}: make the venv with /usr/bin/python3 (README: Set up)")
