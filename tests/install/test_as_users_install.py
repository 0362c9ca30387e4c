"""kprobe-tui installed as the README installs it, then run from where the checkout cannot be imported.

The suite itself runs on an editable install, which reads the source tree: a module the wheel leaves out
is never missed there (it happened: the wheel lost kprobe_tui/aggregate and kprobe_tui/perfprobe, and the
installed kprobe-tui could not start). Here the sdist is built from the checkout and the wheel from the
sdist (what ``python -m build`` and ``pip install .`` do), the wheel goes into a fresh venv outside the
checkout, and the installed copy must answer every command's --help, import every module and paint the TUI.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from kprobe_tui import __version__
from kprobe_tui.cli import COMMAND_NAMES, COMMANDS
from tests.tmux_pane import Terminal

CHECKOUT = Path(__file__).parents[2]
SNAPSHOT_61 = CHECKOUT / "tests" / "fixtures" / "snapshots" / "debian-6.1.tar.gz"
BUILD_TIMEOUT = 600  # pip downloads setuptools for the isolated build and the dependencies for the venv


def source_files() -> set[str]:
    """What the wheel must carry, as paths inside it: every module, and the themes as kprobe_tui/themes."""
    modules = {str(path.relative_to(CHECKOUT)) for path in (CHECKOUT / "kprobe_tui").rglob("*.py")
               if "__pycache__" not in path.parts}
    themes = {f"kprobe_tui/themes/{path.name}" for path in (CHECKOUT / "themes").iterdir()
              if path.suffix in (".tcss", ".toml")}
    return modules | themes


def command_modules() -> list[str]:
    """The modules of kprobe_tui/commands that define a command (``add_parser``), found by reading them."""
    return sorted(path.stem for path in (CHECKOUT / "kprobe_tui" / "commands").glob("*.py")
                  if re.search(r"^def add_parser\(", path.read_text(), re.MULTILINE))


def clean_environment(directory: Path) -> dict[str, str]:
    """No PYTHONPATH, no venv of the suite's on PATH: only the installed copy can answer."""
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join(part for part in env.get("PATH", "").split(os.pathsep)
                                  if not part.startswith(str(CHECKOUT)))
    env["HOME"] = str(directory)  # the config file the TUI remembers a theme in: not the developer's
    return env


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(venv, a directory outside the checkout, its environment, the built files): built and installed once."""
    top = tmp_path_factory.mktemp("as-users-install")
    dist, venv, elsewhere = top / "dist", top / "venv", top / "elsewhere"
    elsewhere.mkdir()
    built = subprocess.run([sys.executable, "-m", "build", "--outdir", str(dist), str(CHECKOUT)],
                           capture_output=True, text=True, timeout=BUILD_TIMEOUT)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    wheel = next(dist.glob("*.whl"))
    pip = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(wheel)], capture_output=True, text=True,
                         timeout=BUILD_TIMEOUT, cwd=elsewhere)
    assert pip.returncode == 0, pip.stdout[-3000:] + pip.stderr[-3000:]
    return venv, elsewhere, clean_environment(elsewhere), dist


def installed_run(installed, *words: str) -> subprocess.CompletedProcess:
    venv, elsewhere, env, _ = installed
    return subprocess.run([str(venv / "bin" / "kprobe-tui"), *words], capture_output=True, text=True,
                          cwd=elsewhere, env=env, timeout=120, stdin=subprocess.DEVNULL)


def test_the_wheel_and_the_sdist_carry_every_module_and_theme(installed):
    *_, dist = installed
    wanted = source_files()
    assert {"kprobe_tui/aggregate/run.py", "kprobe_tui/perfprobe/args.py", "kprobe_tui/themes/default.tcss"} <= wanted
    in_wheel = set(zipfile.ZipFile(next(dist.glob("*.whl"))).namelist())
    assert sorted(wanted - in_wheel) == []
    with tarfile.open(next(dist.glob("*.tar.gz"))) as sdist:
        in_sdist = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    themes_in_tree = {name.replace("kprobe_tui/themes/", "themes/") for name in wanted}
    assert sorted(themes_in_tree - in_sdist) == []


def test_every_command_module_is_a_command():
    """cli.COMMANDS is the one hand-kept list (it orders the help); a command module left out of it fails here."""
    assert sorted(COMMANDS) == command_modules()


def test_the_installed_copy_answers_version_and_every_help(installed):
    version = installed_run(installed, "--version")
    assert (version.returncode, version.stdout.strip()) == (0, f"kprobe-tui {__version__}"), version.stderr
    top = installed_run(installed, "--help")
    assert top.returncode == 0, top.stderr
    for module in command_modules():
        name = COMMAND_NAMES.get(module, module)
        assert re.search(rf"^    {re.escape(name)} ", top.stdout, re.MULTILINE), f"{name} missing from --help"
        helped = installed_run(installed, name, "--help")
        assert helped.returncode == 0 and helped.stdout.startswith("usage: kprobe-tui"), (name, helped.stderr)


def test_every_module_of_the_installed_copy_imports(installed):
    venv, elsewhere, env, _ = installed
    # __main__ runs the program when imported: it is run instead, as ``python -m kprobe_tui``
    script = ("import importlib, pkgutil, kprobe_tui\n"
              "for module in pkgutil.walk_packages(kprobe_tui.__path__, 'kprobe_tui.'):\n"
              "    if not module.name.endswith('.__main__'):\n"
              "        print(importlib.import_module(module.name).__file__)\n")
    ran = subprocess.run([str(venv / "bin" / "python"), "-c", script], capture_output=True, text=True,
                         cwd=elsewhere, env=env, timeout=300, stdin=subprocess.DEVNULL)
    assert ran.returncode == 0, ran.stderr[-3000:]
    files = ran.stdout.split()
    site = str(venv / "lib")
    assert files and all(file.startswith(site) for file in files), "imported from outside the venv"
    imported = {file.split("site-packages/", 1)[1] for file in files}
    modules = {name for name in source_files() if name.endswith(".py") and not name.endswith("/__init__.py")}
    assert sorted(modules - imported) == ["kprobe_tui/__main__.py"]
    as_module = subprocess.run([str(venv / "bin" / "python"), "-m", "kprobe_tui", "--version"], capture_output=True,
                               text=True, cwd=elsewhere, env=env, timeout=120, stdin=subprocess.DEVNULL)
    assert as_module.stdout.strip() == f"kprobe-tui {__version__}", as_module.stderr


def test_the_installed_tui_paints_its_function_list_at_80x24(installed, tmp_path):
    venv, elsewhere, env, _ = installed
    pane = Terminal(tmp_path)
    try:
        command = f"{venv}/bin/kprobe-tui --snapshot {SNAPSHOT_61}; echo EXIT=$?"
        pane.tmux("send-keys", "-t", "t", "-l", f"cd {elsewhere} && env -i PATH=/usr/bin:/bin HOME={env['HOME']} "
                                                 f"TERM=xterm-256color {command}")
        pane.tmux("send-keys", "-t", "t", "Enter")
        pane.wait(lambda: "BIT_initDStream" in pane.screen(), "the function list is painted")  # the snapshot's first rows
        screen = pane.screen()
        assert "kprobe-tui" in screen and "? Help" in screen and "Traceback" not in screen
        pane.tmux("send-keys", "-t", "t", "q")
        pane.wait(lambda: "EXIT=0" in pane.screen(), "the TUI quits with status 0")
    finally:
        pane.close()
