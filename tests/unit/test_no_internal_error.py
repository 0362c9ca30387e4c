"""Inputs a red-team pass found to end in "internal error" (exit 70), a traceback or a hang: each is now a
clean message naming what was wrong. The CLI runs in a child, as a user runs it, with a timeout so a hang
fails the test instead of hanging the suite."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kprobe_tui.errors import UserError
from kprobe_tui.files import open_regular, read_regular

PROJECT = Path(__file__).resolve().parents[2]
SNAPSHOT = PROJECT / "tests" / "fixtures" / "snapshots" / "debian-6.1.tar.gz"
STRUCT_PROGRAM = """
struct rec { const char *name; long n; };
__attribute__((noinline)) long work(struct rec *r) { asm volatile("" ::: "memory"); return r->n; }
int main(void) { struct rec r = {"hello", 3}; return (int)work(&r); }
"""


def cli(*args: str, stdout=subprocess.PIPE, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kprobe_tui", *args], cwd=PROJECT, stdout=stdout,
                          stderr=subprocess.PIPE, text=True, timeout=timeout)


def assert_clean(result: subprocess.CompletedProcess, *words: str) -> None:
    assert result.returncode not in (0, 70), result.stderr
    for bad in ("Traceback", "internal error", "Exception ignored"):
        assert bad not in result.stderr, result.stderr
    for word in words:
        assert word in result.stderr, result.stderr


# --- durations and intervals: finite and positive, said at the start ----------------------------------

@pytest.mark.parametrize("command, option", [
    (["count", "vfs_read"], "--duration"), (["count", "vfs_read"], "--interval"),
    (["hist", "vfs_read", "count"], "--duration"), (["hist", "vfs_read", "count"], "--interval"),
    (["latency", "vfs_read"], "--duration"), (["latency", "vfs_read"], "--interval"), (["tail"], "--duration"),
    (["graph", "vfs_read"], "--duration"),
])
@pytest.mark.parametrize("value", ["nan", "inf", "1e309", "-1", "0"])
def test_durations_and_intervals_must_be_finite_and_positive(command, option, value):
    """``count -d nan`` ran until killed: a deadline of now + nan is never reached. On the snapshot the
    runs can only fail, so a duration let through is said as "read-only", not as the duration."""
    result = cli("--snapshot", str(SNAPSHOT), *command, option, value)
    shown = str(float(value))
    assert_clean(result, f"{option} {shown}: must be a positive number of seconds", f"e.g. {option} 10")
    assert result.returncode == 2


@pytest.mark.parametrize("value", ["nan", "inf", "0"])
def test_exports_once_duration_must_be_finite_and_positive(tmp_path, value):
    """Checked before the CONFIG is read: `export CONFIG --once -d nan` would print its page never."""
    result = cli("export", str(tmp_path / "none.toml"), "--once", "--duration", value)
    assert_clean(result, f"--duration {float(value)}: must be a positive number of seconds", "e.g. --duration 10")
    assert result.returncode == 2


# --- a histogram's value is a number ------------------------------------------------------------------

def build_struct_program(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("struct")
    (directory / "prog.c").write_text(STRUCT_PROGRAM)
    subprocess.run(["gcc", "-g", "-O1", "-o", str(directory / "prog"), str(directory / "prog.c")], check=True)
    return directory / "prog"


@pytest.fixture(scope="module")
def struct_program(tmp_path_factory) -> Path:
    return build_struct_program(tmp_path_factory)


@pytest.mark.parametrize("field, captured", [("name=r->name:string", "string"), ("r->name:char", "char"),
                                             ("r->n:u8[2]", "u8[2]"), ("r->name:symbol", "symbol")])
def test_a_histogram_of_text_is_refused_before_anything_is_traced(struct_program, field, captured):
    """The user-space engine failed at the first hit (int + str: exit 70); tests/live has the live run."""
    result = cli("--snapshot", str(SNAPSHOT), "hist", "-x", str(struct_program), "work", field, "-d", "1")
    assert_clean(result, f"{field}: the value of a histogram must be numeric;", f"is captured as {captured}",
                 "count SPEC --by")


# --- files from the command line that are not readable files ------------------------------------------

@pytest.fixture
def special_files(tmp_path) -> dict[str, str]:
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    return {"/proc/self/mem": "mem: cannot read it (Input/output error)", "/dev/zero": "is a character device",
            str(tmp_path / "dir"): "is a directory", str(tmp_path / "fifo"): "is a FIFO (named pipe)"}


def test_a_regular_file_that_cannot_be_read_is_a_user_error():
    """/proc/self/mem is a regular file (stat says so) whose read at offset 0 is EIO."""
    with open_regular("/proc/self/mem", "-x file") as stream, pytest.raises(UserError, match="cannot read it"):
        stream.read(20)
    with pytest.raises(UserError, match=r"-x file /proc/self/mem: cannot read it \(Input/output error\)"):
        read_regular("/proc/self/mem", "-x file", 1 << 20)


@pytest.mark.parametrize("argv", [["probe", "-n", "-x", "{path}", "work"], ["funcs", "-x", "{path}"],
                                  ["lines", "-x", "{path}", "work"], ["--snapshot", "{path}", "funcs", "vfs_read"],
                                  ["lines", "-k", "{path}", "vfs_read"]])
def test_special_files_named_on_the_command_line_are_refused(special_files, argv):
    for path, words in special_files.items():
        result = cli(*(word.replace("{path}", path) for word in argv), timeout=30)
        assert_clean(result, words)


# --- output that cannot be written --------------------------------------------------------------------

@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["count", "--help"], ["probe", "-h"],
                                  ["--snapshot", str(SNAPSHOT), "funcs", "vfs_*"],
                                  ["--snapshot", str(SNAPSHOT), "funcs", "--json", "vfs_*"],
                                  ["--snapshot", str(SNAPSHOT), "doctor"],
                                  ["--snapshot", str(SNAPSHOT), "probe", "-F", "vfs_rea*"],
                                  ["funcs", "-x", "{program}"], ["lines", "-x", "{program}", "work"],
                                  ["vars", "-x", "{program}", "work"], ["probe", "-x", "{program}", "-L", "work"],
                                  ["probe", "-x", "{program}", "-V", "work"], ["probe", "-x", "{program}", "-F"]])
def test_a_full_device_is_a_message_not_a_traceback(struct_program, argv):
    """Output to /dev/full was exit 70, or a traceback (--help), or "Exception ignored" and exit 120 when
    what was left in the buffer failed only at the interpreter's exit. Every command that writes to
    stdout without the kernel is here; tests/live has those that trace."""
    assert_full_device_is_a_message([word.replace("{program}", str(struct_program)) for word in argv])


def assert_full_device_is_a_message(argv: list[str], timeout: float = 60) -> None:
    with open("/dev/full", "w") as full:
        result = cli(*argv, stdout=full, timeout=timeout)
    assert_clean(result, "kprobe-tui: cannot write output: No space left on device")
    assert result.returncode == 2


def test_a_closed_pipe_ends_quietly():
    """``kprobe-tui funcs | head -1``: the reader leaving is no error, and nothing is said."""
    read, write = os.pipe()
    os.close(read)
    with os.fdopen(write, "w") as closed:
        result = cli("--snapshot", str(SNAPSHOT), "funcs", "vfs_*", stdout=closed)
    assert result.returncode == 0 and result.stderr == "", result.stderr
