"""The seed lab's student on a real kernel (issue 23): the administrator (root) makes the lab's kprobes with
``kprobe-tui probe`` and applies set-up 1 of perf-security.rst (``kernel.perf_event_paranoid = -1``, the
events readable to the students' group by the commands kprobe-tui's own hint gives: tracefs in 6.1 takes
chgrp and chmod); a student (a bare uid and gid, no root, no capability) lists the probes, tails
``probe:tcp_recvmsg_sk`` while making its own loopback TCP traffic, filters to its socket, tails the
``%return`` probe's ``$retval`` and counts by comm; its own ``perf record -a`` + ``perf script`` on the same
traffic is the oracle. Under Debian's default paranoid level it is told why not and what to ask for. The
probes are deleted, tracefs' owners and modes and the paranoid level restored, also on failure.

Few tests, and few Python starts in each: Python is 15-25x slower in the TCG guest (a CLI run: 5-7 s).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from guestlib import run_cli

from kprobe_tui.kernel.events import Events
from kprobe_tui.kernel.perfevent import PARANOID, denied_hint, paranoid
from kprobe_tui.kernel.tracefs import Tracefs

pytestmark = pytest.mark.kernel

STUDENT = 4242  # uid and gid: the guest's root filesystem is the host's, read-only (no useradd)
TRACING = Path("/sys/kernel/tracing")
ENTRY, RETURN = "probe:tcp_recvmsg_sk", "probe:tcp_recvmsg__return"
# Long enough for two tails and a perf record to start in a TCG guest on a busy host (~40 s) and the traffic
TAIL_SECONDS = 90
# Two loopback connections; each size on the command FIFO is sent on the first, size + 1 on the second, and
# each received with one recv (one tcp_recvmsg: loopback carries a message this small in one segment).
TRAFFIC = """
import socket, sys
commands, answers = sys.argv[1:]
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen(2)
pairs = []
for _ in range(2):
    client = socket.create_connection(server.getsockname())
    pairs.append((client, server.accept()[0]))
print("connected", flush=True)
while True:
    for size in map(int, open(commands).read().split()):
        for extra, (client, accepted) in enumerate(pairs):
            client.sendall(b"x" * (size + extra))
            assert len(accepted.recv(size + extra)) == size + extra
    with open(answers, "w") as fifo:
        fifo.write("done\\n")
"""
# "python3   321 [000]    45.678901: probe:tcp_recvmsg_sk: (ffffffff81a2b3c0) sk=0xffff888004a1b2c0"
PERF_LINE = re.compile(r"\s*(?P<comm>.+?)\s+(?P<tid>\d+)\s+\[(?P<cpu>\d+)\]\s+\d+\.\d+:\s+probe:tcp_recvmsg_sk:\s+"
                       r"\([0-9a-f]+\)\s+sk=(?P<sk>0x[0-9a-f]+)$")


STARTED: list[subprocess.Popen] = []  # the student's processes, killed after each test


def set_paranoid(level: int) -> None:
    Path(PARANOID).write_text(f"{level}\n")


def group_readable_commands() -> str:
    """Set-up 1's permission commands as kprobe-tui's hint gives them to the student, for the student's group."""
    commands = denied_hint().split("your group (GROUP): ", 1)[1].split("; or (2)", 1)[0]
    return commands.replace("sudo ", "").replace("GROUP", str(STUDENT))


def owners_and_modes() -> dict[Path, tuple[int, int, int]]:
    """Owner, group and mode of the tracefs root, its files and everything under events (what the hint changes)."""
    paths = [TRACING, *(path for path in TRACING.iterdir() if path.is_file())]
    for directory, subdirectories, files in os.walk(TRACING / "events"):
        paths += [Path(directory, name) for name in (*subdirectories, *files)]
    return {path: (status.st_uid, status.st_gid, status.st_mode) for path in paths if (status := path.stat())}


@pytest.fixture(scope="module")
def lab():
    """The seed lab's probes in perf's default group, made by root and made readable to the students' group as
    the hint says; loopback up. Deleted and the owners and modes restored after, whatever happens."""
    for tool in ("setpriv", "perf", "ip"):
        if shutil.which(tool) is None:
            pytest.skip(f"the guest has no {tool}")
    events = Events(Tracefs(TRACING))
    assert events.events_in("probe") == [], "the guest has probes in group probe already"
    lo_was_down = Path("/sys/class/net/lo/operstate").read_text().strip() == "down"
    before = owners_and_modes()
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)  # the guest's init leaves it down
    try:
        for spec in ("tcp_recvmsg_sk=tcp_recvmsg sk", "tcp_recvmsg%return $retval"):
            made = run_cli("probe", spec)
            assert made.returncode == 0, made.stderr
        subprocess.run(["sh", "-c", group_readable_commands()], check=True)
        yield
    finally:
        events.delete_group("probe")
        kept = {path: status for path, status in before.items() if path.exists()}  # another run's group may have gone
        for path, status in kept.items():
            os.chown(path, status[0], status[1])
            os.chmod(path, status[2])
        assert {path: status for path, status in owners_and_modes().items() if path in kept} == kept
        if lo_was_down:
            subprocess.run(["ip", "link", "set", "lo", "down"], check=True)
    assert "probe/" not in (TRACING / "dynamic_events").read_text()


@pytest.fixture
def home():
    """The student's own directory, with the FIFOs its traffic program obeys."""
    directory = Path(f"/tmp/kpstudent-{os.getpid()}")
    directory.mkdir(mode=0o700)
    try:
        for name in ("commands", "answers"):
            os.mkfifo(directory / name, 0o600)
        (directory / "traffic.py").write_text(TRAFFIC)
        for path in (directory, *directory.iterdir()):
            os.chown(path, STUDENT, STUDENT)
        yield directory
    finally:
        for child in STARTED:  # a tail left by a failure holds its events open: they could not be deleted
            child.kill()
            child.wait()
        STARTED.clear()
        shutil.rmtree(directory)


@pytest.fixture(params=["paranoid -1", "capable perf"])
def set_up(request):
    """The administrator's set-up for the test's length: the perf the student runs, and its environment. The
    level before and tracefs restored, also on failure. Set-up 2 is a copy of perf with perf-security.rst's
    capabilities at paranoid 2: above 2 Debian's patch lets only CAP_SYS_ADMIN open a perf event."""
    before = paranoid()
    assert before is not None
    directory = Path(f"/tmp/kpstudent-perfusers-{os.getpid()}")
    try:
        if request.param == "capable perf":
            set_paranoid(min(before, 2))
            directory.mkdir(mode=0o755)
            perf = directory / "perf"
            shutil.copy2(shutil.which("perf") or "perf", perf)
            subprocess.run(["setcap", "cap_perfmon,cap_sys_ptrace,cap_syslog=ep", str(perf)], check=True)
            yield str(perf), {"KPROBE_TUI_PERF": str(perf)}
        else:
            set_paranoid(-1)
            yield "perf", {}
    finally:
        set_paranoid(before)
        shutil.rmtree(directory, ignore_errors=True)


def as_student(home: Path, *command: str, env: dict[str, str] | None = None, stdin=None) -> subprocess.Popen:
    """``command`` as the student: its uid and gid, no other group, no capability; the guest's PYTHONPATH
    (the project and the venv's packages) kept."""
    child = subprocess.Popen(["setpriv", f"--reuid={STUDENT}", f"--regid={STUDENT}", "--clear-groups", "--inh-caps=-all",
                              *command],
                             cwd=home, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "HOME": str(home), "PYTHONDONTWRITEBYTECODE": "1", **(env or {})})
    STARTED.append(child)
    return child


def kprobe_tui(home: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    return as_student(home, sys.executable, "-m", "kprobe_tui", *args, env=env)


def tail(home: Path, env: dict[str, str], *args: str, seconds: int = TAIL_SECONDS) -> subprocess.Popen:
    """``kprobe-tui tail --json`` as the student, returned once its events are open (its first line on stderr)."""
    child = kprobe_tui(home, "tail", "--json", "--duration", str(seconds), *args, env=env)
    announced = b""  # read from the pipe itself: communicate() reads past any buffer
    while not announced.endswith(b"\n") and (byte := os.read(child.stderr.fileno(), 1)):
        announced += byte
    assert b"no trace instance here: the events are sampled" in announced, announced.decode() + child.stderr.read()
    return child


def send(home: Path, sizes: str) -> None:
    """Have the student's traffic program send and receive ``sizes`` on both its connections; wait until done."""
    (home / "commands").write_text(sizes + "\n")
    assert (home / "answers").read_text() == "done\n"


def tailed(child: subprocess.Popen) -> list[dict]:
    """A tail's events, once its --duration is over."""
    out, err = child.communicate(timeout=300)
    assert child.returncode == 0 and "events lost" not in err, err
    return [json.loads(line) for line in out.splitlines()]


def number(value) -> int:
    return int(value, 0) if isinstance(value, str) else int(value)


def test_under_debians_default_paranoid_the_student_is_told_what_to_ask_for(lab, home):
    level = paranoid()
    if level is None or level < 1:
        pytest.skip(f"kernel.perf_event_paranoid is {level} in this guest")
    out, err = kprobe_tui(home, "tail", ENTRY, "--duration", "1").communicate(timeout=120)
    assert not out and f"kernel.perf_event_paranoid is {level}" in err and "Traceback" not in err, err
    assert "sudo sysctl kernel.perf_event_paranoid=-1" in err
    assert "sudo setcap cap_perfmon,cap_sys_ptrace,cap_syslog=ep /usr/bin/perf" in err
    if level > 2:  # Debian's patch: above 2 only CAP_SYS_ADMIN opens a perf event (kernel/events/core.c, 6.1)
        assert "needs -1 or CAP_SYS_ADMIN" in err and "sudo sysctl kernel.perf_event_paranoid=2" in err
    else:
        assert "needs -1 or CAP_PERFMON" in err


def test_the_students_seed_lab_is_its_own_perf_records(lab, home, set_up):
    perf, env = set_up
    listed, err = kprobe_tui(home, "list").communicate(timeout=120)
    assert "p:probe/tcp_recvmsg_sk tcp_recvmsg sk=" in listed, listed + err
    assert "r10:probe/tcp_recvmsg__return tcp_recvmsg arg1=$retval" in listed

    traffic = as_student(home, "/usr/bin/python3", str(home / "traffic.py"), str(home / "commands"),
                         str(home / "answers"))
    assert traffic.stdout.readline() == "connected\n", traffic.stderr.read()
    comm = Path(f"/proc/{traffic.pid}/comm").read_text().strip()
    entries, returns = tail(home, env, ENTRY), tail(home, env, RETURN)
    # perf starts its command once its events are enabled: the poke makes the traffic while it records
    recording = as_student(home, perf, "record", "-q", "-e", ENTRY, "-a", "-o", str(home / "perf.data"), "--",
                           "sh", "-c", f"echo 11 222 3333 > {home}/commands && cat {home}/answers")
    _, err = recording.communicate(timeout=300)
    assert recording.returncode == 0, err
    script, err = as_student(home, perf, "script", "-i", str(home / "perf.data")).communicate(timeout=300)
    oracle = [row for row in map(PERF_LINE.fullmatch, script.splitlines()) if row and int(row["tid"]) == traffic.pid]
    assert len(oracle) == 6, script + err

    seen = [event for event in tailed(entries) if event["pid"] == traffic.pid]
    assert [(event["comm"], event["cpu"], number(event["args"]["sk"])) for event in seen] == [
        (row["comm"], int(row["cpu"]), int(row["sk"], 16)) for row in oracle]
    mine, other = ({number(event["args"]["sk"]) for event in seen[start::2]} for start in (0, 1))
    assert len(mine) == len(other) == 1 and mine != other and comm == seen[0]["comm"]
    retvals = [number(event["args"]["arg1"]) for event in tailed(returns) if event["pid"] == traffic.pid]
    assert retvals == [11, 12, 222, 223, 3333, 3334]

    sk = hex(mine.pop())
    filtered = tail(home, env, ENTRY, "--filter", f"sk == {sk}", seconds=TAIL_SECONDS // 2)
    send(home, "44 555")
    kept = tailed(filtered)
    assert [(event["pid"], hex(number(event["args"]["sk"]))) for event in kept] == [(traffic.pid, sk)] * 2

    counting = kprobe_tui(home, "count", ENTRY, "--by", "comm", "--json", env=env)  # the event by name, as perf's -e
    announced = b""
    while not announced.endswith(b"\n") and (byte := os.read(counting.stderr.fileno(), 1)):
        announced += byte
    assert b"user engine: the events are sampled and aggregated here" in announced, announced.decode()
    send(home, "7 8")
    counting.send_signal(signal.SIGINT)
    counted, err = counting.communicate(timeout=300)
    assert counting.returncode == 0, err
    [final] = [json.loads(line) for line in counted.splitlines()]
    assert [entry for entry in final["entries"] if entry["key"] == {"comm": comm}] == [{"key": {"comm": comm}, "count": 4}]
    assert "lost" not in final, counted


SSH_PORT = 2222


@pytest.fixture
def sshd(home):
    """A real sshd on 127.0.0.1:SSH_PORT that lets the student in with a key. The guest's /etc/passwd is the host's
    (read-only): the student is added to a copy bind-mounted over it, unmounted after."""
    for tool in ("/usr/sbin/sshd", "ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            pytest.skip(f"the guest has no {tool}")
    keys = Path(f"/tmp/kpsshd-{os.getpid()}")
    keys.mkdir(mode=0o755)
    passwd = keys / "passwd"
    passwd.write_text(Path("/etc/passwd").read_text() + f"kpstudent:x:{STUDENT}:{STUDENT}::{home}:/bin/sh\n")
    passwd.chmod(0o644)
    subprocess.run(["mount", "--bind", str(passwd), "/etc/passwd"], check=True)
    daemon = None
    try:
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / "host")], check=True)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(home / "id")], check=True)
        for key in (home / "id", home / "id.pub"):
            os.chown(key, STUDENT, STUDENT)
        shutil.copy(home / "id.pub", keys / "authorized")
        (keys / "sshd_config").write_text(
            f"Port {SSH_PORT}\nListenAddress 127.0.0.1\nHostKey {keys / 'host'}\nAuthorizedKeysFile {keys / 'authorized'}\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nPidFile none\n")
        # sshd wants /run/sshd, its privilege separation directory; the guest's /run is the host's, read-only: a
        # tmpfs on /run in a mount namespace of its own (the student's session sees it too, with no lock directory)
        start = f"mount -t tmpfs -o mode=755 tmpfs /run && mkdir -m 755 /run/sshd && exec /usr/sbin/sshd -D -e -f {keys}/sshd_config"
        daemon = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", start],
                                  stderr=subprocess.PIPE, text=True)
        for _ in range(600):  # until it listens
            if any(row[1].endswith(f":{SSH_PORT:04X}") and row[3] == "0A" for row in tcp_rows()):
                break
            assert daemon.poll() is None, daemon.stderr.read()
            time.sleep(0.1)
        yield daemon
    finally:
        # the student's session (its sshd and the tail under it, which holds the lab's events open) ends first
        subprocess.run(["pkill", "-KILL", "-u", str(STUDENT)], capture_output=True)
        for _ in range(300):
            if subprocess.run(["pgrep", "-u", str(STUDENT)], capture_output=True).returncode != 0:
                break
            time.sleep(0.1)
        if daemon is not None:
            daemon.terminate()
            daemon.wait()
        subprocess.run(["umount", "/etc/passwd"], check=True)
        shutil.rmtree(keys)


def server_socket_address() -> int:
    """The kernel address of sshd's end of the one connection to SSH_PORT, from /proc/net/tcp (root with
    CAP_SYSLOG sees real addresses under kptr_restrict 1; under 0 they are hashed)."""
    kptr_restrict = Path("/proc/sys/kernel/kptr_restrict")
    before = kptr_restrict.read_text()
    kptr_restrict.write_text("1\n")
    try:
        rows = tcp_rows()
    finally:
        kptr_restrict.write_text(before)
    [address] = [int(row[11], 16) for row in rows if row[1].endswith(f":{SSH_PORT:04X}") and row[3] == "01"]
    return address


def tcp_rows() -> list[list[str]]:
    """/proc/net/tcp's sockets: [1] local address:port, [3] state (0A listening, 01 established), [11] the socket."""
    return [line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:]]


def test_over_ssh_the_student_is_offered_its_own_connections_socket(lab, home, sshd):
    """The student, logged in over SSH, tails probe:tcp_recvmsg_sk and types: its tail names the socket its own
    sshd reads (the one /proc/net/tcp gives for the connection) and the filters that keep it or leave it out."""
    before = paranoid()
    assert before is not None
    set_paranoid(-1)
    try:
        remote = (f"cd {home} && PYTHONPATH={shlex.quote(os.environ.get('PYTHONPATH', ''))} PYTHONDONTWRITEBYTECODE=1 "
                  f"exec {sys.executable} -m kprobe_tui tail {ENTRY} --json --duration {TAIL_SECONDS}")
        session = as_student(home, "ssh", "-F", "/dev/null", "-i", str(home / "id"), "-p", str(SSH_PORT), "-o", "BatchMode=yes",
                             "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
                             "kpstudent@127.0.0.1", remote, stdin=subprocess.PIPE)
        said = []
        while not any("your SSH connection's socket" in line for line in said):
            line = session.stderr.readline()
            assert line, "".join(said)  # the session ended before the offer
            said.append(line)
            if "no trace instance here" in line:  # the tail reads: type, as a student does; sshd reads each key
                session.stdin.write("ls\n" * 5)
                session.stdin.flush()
        address = server_socket_address()
        offer = said[-1]
        assert f"socket is sk={address:#x}: --filter 'sk == {address:#x}' keeps only it, " \
               f"--filter 'sk != {address:#x}' leaves it out" in offer, offer
    finally:
        set_paranoid(before)
