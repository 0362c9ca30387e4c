"""Files that are not what they should be: a FIFO, a device, a socket or a directory where a regular
file is expected is a clear error at once (a FIFO used to block the open forever), and a file that
never ends (/dev/zero, a huge one) is bounded."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from kprobe_tui import config
from kprobe_tui.kernel import catalog as catalog_module
from kprobe_tui.kernel.catalog import Catalog
from kprobe_tui.kernel.sources import KernelSources


@pytest.fixture
def deadline():
    """In-process reads that would block forever fail after 10 s instead (the open of a FIFO is interrupted)."""
    def expired(signum, frame):
        raise TimeoutError("blocked: the file was opened as if it were a regular file")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(10)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def fifo(tmp_path) -> Path:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """The CLI in a child with a deadline: a hang is a TimeoutExpired, i.e. a failure."""
    return subprocess.run([sys.executable, "-m", "kprobe_tui", *args], capture_output=True, text=True, timeout=30,
                          stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})})


@pytest.mark.parametrize("args, what", [
    (["lines", "-x", "{path}", "main"], "-x file"),
    (["vars", "-x", "{path}", "main"], "-x file"),
    (["probe", "-n", "-x", "{path}", "main", "n"], "-x file"),
    (["probe", "-n", "-x", "{path}", "main"], "-x file"),
    (["-x", "{path}"], "-x file"),  # the TUI: refused before any screen
    (["lines", "-k", "{path}", "tcp_sendmsg"], "-k file"),
    (["--kallsyms", "{path}", "funcs", "vfs_read"], "--kallsyms file"),
    (["--kallsyms", "{path}", "doctor"], "--kallsyms file"),
    (["--btf", "{path}", "funcs", "vfs_read"], "--btf file"),
    (["--snapshot", "{path}", "funcs"], "snapshot"),
])
@pytest.mark.parametrize("kind", ["fifo", "device", "directory", "socket"])
def test_a_special_file_is_refused_at_once(tmp_path, fifo, args, what, kind):
    if kind == "fifo":
        path, words = fifo, "is a FIFO (named pipe), not a regular file"
    elif kind == "device":
        path, words = Path("/dev/zero"), "is a character device, not a regular file"
    elif kind == "directory":
        path, words = tmp_path, "is a directory, not a regular file"
    else:
        path, words = tmp_path / "sock", "is a socket, not a regular file"
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(path))
    result = cli(*(arg.format(path=path) for arg in args))
    # probe exits as perf probe does when the target cannot be read (-ENOENT); the other commands with 2
    assert result.returncode == (254 if args[0] == "probe" else 2), result.stderr
    assert f"{what} {path}: {words}" in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_a_fifo_as_the_config_file_is_ignored_with_a_warning(fifo, deadline):
    settings, problem = config.load(fifo)
    assert settings == {} and problem == f"ignored the config file {fifo}: is a FIFO (named pipe), not a regular file"


def test_a_config_file_that_never_ends_is_bounded(tmp_path):
    huge = tmp_path / "config.toml"
    with open(huge, "wb") as out:
        out.truncate(config.MAX_CONFIG + 1)  # sparse: costs no disk
    settings, problem = config.load(huge)
    assert settings == {} and "is larger than" in problem


def test_kallsyms_reads_are_bounded(tmp_path, monkeypatch):
    """A regular file can be huge too (or /proc-like, saying size 0): what is read is capped."""
    monkeypatch.setattr(catalog_module, "MAX_KALLSYMS", 1 << 20)
    huge = tmp_path / "kallsyms"
    with open(huge, "wb") as out:
        out.write(b"ffffffff81000000 T start\n")
        out.truncate(3 << 20)
    catalog = Catalog(KernelSources(None, None, huge, tmp_path, live=False))
    assert catalog.names == []
    assert any(f"kallsyms {huge}: is larger than 1 MiB" in note for note in catalog.notes), catalog.notes
