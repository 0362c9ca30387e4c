"""A perf probe tutorial's command lines, verbatim, with `kprobe-tui probe` in perf's place (issue 12 item 5).

Each command runs with the guest's `perf probe` (6.1, the oracle) and then with kprobe-tui, on the same
kernel: the kprobe_events lines they leave must be the same probe (group, name, prefix, address and
fetch-args with their locations and types), and the text printed the same. perf writes a kernel place
as ``_text+OFFSET`` where kprobe-tui writes ``SYMBOL+OFFSET``: both are turned into an address with
/proc/kallsyms before they are compared. Whatever a test makes it removes (the tracefs fixture checks).

The tutorial's -L/-V and the ``tcp_recvmsg sk flags:x`` probe read the kernel's DWARF: they run where
Debian's debug vmlinux of the guest's release is cached (6.1, tests/debuginfo/kernel_debug.py).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from guestlib import run_cli
from harness import PROJECT

from kprobe_tui.kernel.events import Events

sys.path.insert(0, str(PROJECT / "tests" / "debuginfo"))
from kernel_debug import CACHE_DIR  # noqa: E402

pytestmark = pytest.mark.kernel

VMLINUX = CACHE_DIR / f"vmlinux-{os.uname().release}"
SOURCE = CACHE_DIR / "linux-source-6.1"
TIMEOUT = 900  # perf and Python reading a 633 MB vmlinux under TCG


PROGRAM = "dropinprog"  # perf's group for probes on it: probe_dropinprog


@pytest.fixture
def perf_group(tracefs):
    """perf's default groups are the tutorial's: empty before, and emptied after, whatever happens."""
    events = Events(tracefs)
    assert events.events_in("probe") == [], "the guest has probes in group probe already"
    yield
    for group in ("probe", f"probe_{PROGRAM}"):
        events.delete_group(group)


@pytest.fixture
def program(tmp_path) -> Path:
    (tmp_path / "prog.c").write_text("__attribute__((noinline)) int work(int n) { return n + 1; }\n"
                                     "int main(int argc, char **argv) { return work(argc) > 10; }\n")
    subprocess.run(["gcc", "-O1", "-o", str(tmp_path / PROGRAM), str(tmp_path / "prog.c")], check=True)
    return tmp_path / PROGRAM


def perf(*words: str) -> subprocess.CompletedProcess:
    return subprocess.run(["perf", "probe", *words], capture_output=True, text=True, timeout=TIMEOUT)


def kprobe_tui(*words: str) -> subprocess.CompletedProcess:
    return run_cli("probe", *words, timeout=TIMEOUT)


def kallsyms() -> dict[str, int]:
    table = {}
    for line in Path("/proc/kallsyms").read_text().splitlines():
        address, _, name = line.split()[:3]
        table.setdefault(name, int(address, 16))
    return table


def probe_of(line: str, symbols: dict[str, int]) -> tuple:
    """(prefix, GROUP/EVENT, address, fetch-args) of a kprobe_events or -D line, its place made an address."""
    head, place, *args = line.split()
    kind, name = head.split(":", 1)  # kind: p, or r with the kernel's maxactive (r16) in kprobe_events
    match = re.fullmatch(r"(?:\w+:)?([\w.]+)(?:\+(\d+|0x[0-9a-f]+))?", place)
    assert match, line
    return kind, name, symbols[match[1]] + int(match[2] or "0", 0), tuple(args)


def made_by(tool, words: list[str], root: Path) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run an adding command; return what it printed and the kprobe_events lines of group probe it left."""
    done = tool(*words)
    lines = [line for line in (root / "kprobe_events").read_text().splitlines() if re.match(r"\w+:probe/", line)]
    return done, lines


def added_text(stderr: str) -> str:
    """perf's 'Added new event' message (perf prints warnings of its own before it when it lacks debug info)."""
    return stderr[stderr.index("Added new event"):] if "Added new event" in stderr else stderr


@pytest.mark.parametrize("words", [
    ["-a", "do_sys_openat2 filename=+0(%si):string"],
    ["do_sys_openat2%return $retval"],
    ["--add", "do_sys_openat2 dfd=%di:s32 how=%dx:x64"],
], ids=["add-raw-string", "return-retval", "add-named-registers"])
def test_perf_dropin_raw_probes_are_perfs(tracefs, perf_group, words):
    """The tutorial's probes that need no debug info: the same probe in kprobe_events, the same text."""
    symbols = kallsyms()
    theirs, their_lines = made_by(perf, words, tracefs.root)
    assert theirs.returncode == 0 and their_lines, theirs.stderr
    assert perf("-q", "-d", "probe:*").returncode == 0
    mine, my_lines = made_by(kprobe_tui, words, tracefs.root)
    assert mine.returncode == 0, mine.stderr
    assert [probe_of(line, symbols) for line in my_lines] == [probe_of(line, symbols) for line in their_lines]
    assert added_text(mine.stderr) == added_text(theirs.stderr)
    assert kprobe_tui("-q", "-d", "probe:*").returncode == 0


def test_perf_dropin_list_and_delete_globs_are_perfs(tracefs, perf_group, program):
    """-l prints what perf prints for the same probes; ``-d 'probe_*:*'`` (the lab's, for probes on programs)
    leaves the kernel's group probe alone, ``-d 'probe:*'`` removes it, each saying what perf says."""
    steps = [["do_sys_openat2 filename=+0(%si):string"], ["-x", str(program), "work"]]
    said = {}
    for tool in (perf, kprobe_tui):
        for words in steps:
            done = tool(*words)
            assert done.returncode == 0, done.stderr
        listed = tool("-l")
        gone_uprobes = tool("-d", "probe_*:*")
        left = (tracefs.root / "kprobe_events").read_text()
        gone_kprobes = tool("-d", "probe:*")
        nothing = tool("-d", "probe:*")
        said[tool] = (listed.returncode, listed.stdout, gone_uprobes.returncode, gone_uprobes.stderr,
                      "probe/do_sys_openat2" in left, gone_kprobes.returncode, gone_kprobes.stderr, nothing.returncode)
    assert said[perf][4] and said[perf][7] == 254
    ours_listed = [line for line in said[kprobe_tui][1].splitlines() if line.startswith("  probe")]
    perfs_listed = [line for line in said[perf][1].splitlines() if line.startswith("  probe")]
    assert ours_listed == perfs_listed and len(perfs_listed) == 2
    assert said[kprobe_tui][2:] == said[perf][2:]


needs_vmlinux = pytest.mark.skipif(not VMLINUX.exists() or not SOURCE.exists(),
                                   reason=f"no debug vmlinux {VMLINUX} and source for this release (6.1 only)")


@needs_vmlinux
def test_perf_dropin_tcp_recvmsg_sk_flags_x_is_perfs():
    """The primer's ``tcp_recvmsg sk flags:x``: x with no width takes flags' own (x32), where its
    register is perf's; the same line from -D, its place made an address."""
    symbols = kallsyms()
    words = ["-k", str(VMLINUX), "-D", "tcp_recvmsg sk flags:x"]
    theirs, mine = perf(*words), kprobe_tui(*words)
    assert theirs.returncode == mine.returncode == 0, mine.stderr
    assert [probe_of(line, symbols) for line in mine.stdout.splitlines()] == [
        probe_of(line, symbols) for line in theirs.stdout.splitlines()]
    assert "flags_x=" in mine.stdout and ":x32" in mine.stdout


@needs_vmlinux
def test_perf_dropin_named_tcp_recvmsg_probe_unquoted_is_perfs(tracefs, perf_group):
    """``perf probe tcp_recvmsg_sk_flags=tcp_recvmsg sk flags:x`` as the lab types it (unquoted: the words
    after the options make one probe): the same event in kprobe_events and the same text."""
    symbols = kallsyms()
    words = ["-k", str(VMLINUX), "tcp_recvmsg_sk_flags=tcp_recvmsg", "sk", "flags:x"]
    theirs, their_lines = made_by(perf, words, tracefs.root)
    assert theirs.returncode == 0 and their_lines, theirs.stderr
    assert perf("-q", "-d", "probe:*").returncode == 0
    mine, my_lines = made_by(kprobe_tui, words, tracefs.root)
    assert mine.returncode == 0, mine.stderr
    assert kprobe_tui("-q", "-d", "probe:*").returncode == 0
    assert [probe_of(line, symbols) for line in my_lines] == [probe_of(line, symbols) for line in their_lines]
    assert their_lines[0].startswith("p:probe/tcp_recvmsg_sk_flags ")
    assert added_text(mine.stderr) == added_text(theirs.stderr)


@needs_vmlinux
@pytest.mark.parametrize("words", [["-L", "tcp_recvmsg"], ["-V", "tcp_recvmsg"]], ids=["lines", "vars"])
def test_perf_dropin_lines_and_vars_are_perfs_byte_for_byte(words):
    theirs = perf("-k", str(VMLINUX), "-s", str(SOURCE), *words)
    mine = kprobe_tui("-k", str(VMLINUX), "-s", str(SOURCE), *words)
    assert theirs.returncode == 0 and theirs.stdout, theirs.stderr
    assert (mine.returncode, mine.stdout) == (theirs.returncode, theirs.stdout), mine.stderr


@pytest.fixture
def debug_vmlinux_where_debian_puts_it():
    """The cached debug vmlinux where ``linux-image-*-dbg`` installs it, /usr/lib/debug/boot/vmlinux-$(uname -r),
    for the test's duration: the guest sees the host's / read-only, so a tmpfs over /usr/lib/debug holds a link."""
    debug = Path("/usr/lib/debug")
    subprocess.run(["mount", "-t", "tmpfs", "lab-debug", str(debug)], check=True)
    try:
        (debug / "boot").mkdir()
        (debug / "boot" / f"vmlinux-{os.uname().release}").symlink_to(VMLINUX)
        yield
    finally:
        subprocess.run(["umount", str(debug)], check=True)


# The seed lab's probes, as the lab types them after `perf probe`: no -k, no -s.
LAB_PROBES = [
    ["-D", "tcp_recvmsg:20 sk"],
    ["-D", "tcp_recvmsg sk flags:x"],
    ["-D", "tcp_recvmsg_sk=tcp_recvmsg sk"],
    ["-D", "tcp_recvmsg%return $retval"],
]


@needs_vmlinux
@pytest.mark.parametrize("words", LAB_PROBES, ids=["line-20", "sk-flags-x", "named-sk", "return-retval"])
def test_perf_dropin_lab_lines_verbatim_find_the_debug_vmlinux_as_perf(debug_vmlinux_where_debian_puts_it, words):
    """Without -k both find the running kernel's debug vmlinux where Debian installs it, and make the same probes."""
    symbols = kallsyms()
    theirs, mine = perf(*words), kprobe_tui(*words)
    assert theirs.returncode == 0 and theirs.stdout, theirs.stderr
    assert mine.returncode == 0, mine.stderr
    assert [probe_of(line, symbols) for line in mine.stdout.splitlines()] == [
        probe_of(line, symbols) for line in theirs.stdout.splitlines()]


@needs_vmlinux
def test_perf_dropin_lab_line_probe_dry_run_verbatim(debug_vmlinux_where_debian_puts_it):
    """``perf probe -n 'tcp_recvmsg:20 sk'``: the line and its variable from DWARF found without -k, perf's text."""
    theirs, mine = perf("-n", "tcp_recvmsg:20 sk"), kprobe_tui("-n", "tcp_recvmsg:20 sk")
    assert theirs.returncode == mine.returncode == 0, mine.stderr
    assert added_text(mine.stderr) == added_text(theirs.stderr)


@needs_vmlinux
def test_perf_dropin_lab_vars_verbatim(debug_vmlinux_where_debian_puts_it):
    theirs, mine = perf("-V", "tcp_recvmsg"), kprobe_tui("-V", "tcp_recvmsg")
    assert theirs.returncode == 0 and theirs.stdout, theirs.stderr
    assert (mine.returncode, mine.stdout) == (theirs.returncode, theirs.stdout), mine.stderr


@needs_vmlinux
def test_perf_dropin_funcs_leave_out_init_text_as_perf(debug_vmlinux_where_debian_puts_it):
    """``--funcs '*aio*'``: __init functions (aio_setup), freed after boot, are not offered, as perf leaves them
    out when it reads the debug vmlinux (from kallsyms alone it lists them). perf also lists data symbols
    (aio_max_nr, initcall pointers): its list is compared on functions."""
    theirs, mine = perf("--funcs", "*aio*"), kprobe_tui("--funcs", "*aio*")
    assert theirs.returncode == 0 and "aio_read" in theirs.stdout, theirs.stderr
    text = {line.split()[2] for line in Path("/proc/kallsyms").read_text().splitlines() if line.split()[1] in "tTwW"}
    perfs_functions = [name for name in theirs.stdout.split() if name in text]
    assert "aio_setup" in text and "aio_setup" not in perfs_functions
    assert (mine.returncode, mine.stdout.split()) == (0, perfs_functions), mine.stderr
