"""Untrusted text stays data on the terminal: what a traced program says, what its files hold, what an
administrator named by hand. Nothing the CLI prints carries a control character; --json stays exact."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kprobe_tui.kernel.tracefs import Tracefs
from kprobe_tui.probes.symbols import ElfSymbols
from kprobe_tui.textsafe import printable
from tests.live.hostile import ESCAPES, FORBIDDEN, MARKUP, RENAMED, SAID, build_hostile
from tests.live.test_tail import start_tail

GROUP = "kpthostile"
FETCH = "s=+0(%di):string n=%si:s32"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kprobe_tui", *args], capture_output=True, text=True, timeout=120)


def assert_terminal_safe(text: str) -> None:
    leaked = [seq for seq in FORBIDDEN if seq in text]
    assert not leaked, f"{leaked} reached the terminal in: {text!r}"


@pytest.fixture
def hostile(tracefs_root, tmp_path):
    """The hostile program with ``kpthostile/shout`` (capturing the string it is given) made by hand."""
    binary = build_hostile(tmp_path)
    offset = ElfSymbols(binary).function("shout").file_offset
    top = Tracefs(tracefs_root)
    top.write("uprobe_events", f"p:{GROUP}/shout {binary}:0x{offset:x} {FETCH}\n")
    try:
        yield top, binary
    finally:
        for line in (tracefs_root / "uprobe_events").read_text().splitlines():
            if f":{GROUP}/" in line:
                top.write("uprobe_events", f"-:{line.split()[0].split(':', 1)[1]}\n")


def tail(tracefs_root: Path, *args: str) -> subprocess.Popen:
    return start_tail(tracefs_root, "--duration", "3", *args, event=f"{GROUP}/shout")


@pytest.mark.live
def test_tail_shows_a_captured_escape_sequence_as_text(hostile, tracefs_root):
    top, binary = hostile
    child = tail(tracefs_root)
    subprocess.run([str(binary)], check=True, capture_output=True)
    out, err = child.communicate(timeout=30)
    assert child.returncode == 0, err
    assert_terminal_safe(out + err)
    assert 's="\\x1b]0;title\\x07\\x1b[2J"' in out  # shown, escaped, on its own line
    assert f's="{MARKUP}"' in out and 's="\\u202eolleh"' in out
    assert len([line for line in out.splitlines() if "shout:" in line]) == 3


@pytest.mark.live
def test_tail_json_keeps_the_exact_bytes(hostile, tracefs_root):
    top, binary = hostile
    child = tail(tracefs_root, "--json")
    subprocess.run([str(binary)], check=True, capture_output=True)
    out, err = child.communicate(timeout=30)
    assert child.returncode == 0, err
    assert_terminal_safe(out)  # JSON escapes them itself
    assert [json.loads(line)["args"]["s"] for line in out.splitlines()] == SAID


@pytest.mark.live
def test_list_shows_a_hostile_path_escaped(hostile, tracefs_root, tmp_path):
    """An administrator's probe on a file whose directory name holds an escape sequence."""
    top, binary = hostile
    odd = tmp_path / f"dir{ESCAPES}"
    odd.mkdir()
    shutil.copy(binary, odd / "prog")
    offset = ElfSymbols(binary).function("shout").file_offset
    # by hand, as an administrator would (our own writer refuses control characters)
    events = os.open(tracefs_root / "uprobe_events", os.O_WRONLY | os.O_APPEND)
    try:
        os.write(events, f"p:{GROUP}/odd {odd / 'prog'}:0x{offset:x}\n".encode())
    finally:
        os.close(events)
    listed = cli("list", f"{GROUP}/*")
    assert listed.returncode == 0, listed.stderr
    assert_terminal_safe(listed.stdout)
    assert "dir\\x1b]0;title\\x07\\x1b[2J/prog" in listed.stdout
    assert ESCAPES in "".join(json.loads(line)["definition"] for line in cli("list", "--json", f"{GROUP}/*").stdout.splitlines())


def test_renamed_symbols_and_source_text_are_escaped_by_the_cli(tmp_path):
    """ELF symbol names (funcs -x does not exist yet: the probe compiler's refusal names them), and a
    source file holding raw escapes, a form feed and a U+2028 (which must not shift line numbers)."""
    binary = build_hostile(tmp_path)
    listing = cli("lines", "-x", str(binary), "shout")
    assert listing.returncode == 0, listing.stderr
    assert_terminal_safe(listing.stdout + listing.stderr)
    source = (tmp_path / "hostile.c").read_text().split("\n")
    marker = next(n for n, line in enumerate(source, 1) if "/* HOSTILE LINE */" in line)
    decl = next(n for n, line in enumerate(source, 1) if line.startswith("__attribute__((noinline)) int shout"))
    [numbered] = [line for line in listing.stdout.splitlines() if line.startswith(f"{marker - decl:7d}  ")]
    assert "/* HOSTILE LINE */" in numbered  # the form feed and U+2028 above did not shift the text
    header = cli("lines", "-x", str(binary), "hostile.c:1-14")
    assert "\\x1b]0;title\\x07\\x1b[2J [/]close" in header.stdout and "feed\\x0c and a U+2028\\u2028" in header.stdout
    assert_terminal_safe(header.stdout)
    for name in RENAMED.values():
        refused = cli("probe", "-n", "-x", str(binary), name)
        assert refused.returncode == 234 and "Traceback" not in refused.stderr  # perf probe's status for a bad argument
        assert_terminal_safe(refused.stdout + refused.stderr)
    variables = cli("vars", "-x", str(binary), "shout")
    assert variables.returncode == 0 and "char*\ts" in variables.stdout.replace("const ", "")


def test_perf_counts_the_same_lines(tmp_path):
    """The line numbers `lines` prints for the hostile source are perf's (newlines only)."""
    if shutil.which("perf") is None:
        pytest.skip("perf is not installed")
    binary = build_hostile(tmp_path)
    perf = subprocess.run(["perf", "probe", "-x", str(binary), "-L", "shout"], capture_output=True, text=True,
                          errors="surrogateescape")
    if perf.returncode != 0:
        pytest.skip(f"perf probe -L failed: {perf.stderr.strip()}")
    ours = cli("lines", "-x", str(binary), "hostile.c:1-14").stdout
    perf = subprocess.run(["perf", "probe", "-x", str(binary), "-L", "hostile.c:1-14"], capture_output=True,
                          text=True, errors="surrogateescape")
    assert perf.returncode == 0, perf.stderr
    assert ours.splitlines() == [printable(line, keep="\t") for line in perf.stdout.split("\n")][:-1]
