"""The feedback guard: never cause, once per traced event, an event you also trace.

Showing an event makes us write to the terminal; over SSH that write goes through the pty, sshd
and TCP. A probe on that path fires for our own output, which we show, which fires again: a
flood that can take the connection down. So our own PID is filtered out by default, and over
SSH a probe on the output path needs confirmation and gets the filter that excludes sshd too. A session
``kprobe-tui serve`` runs for a browser is the same loop: its screen goes down a pipe to the server,
whose TCP sends carry it; the server is named in our environment (``SERVED_BY``) and excluded as sshd is.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

import psutil

from kprobe_tui.probes.spec import ProbeSpec

# Kernel functions a socket's traffic passes through: our output forwarded by sshd, and a server's answers.
NETWORK_PATH = (
    "tcp_sendmsg*", "tcp_recvmsg*", "tcp_push*", "tcp_write_xmit", "*tcp_transmit_skb", "tcp_rcv_*",
    "tcp_v4_rcv", "tcp_v6_rcv", "tcp_ack*", "tcp_v4_do_rcv", "tcp_data_queue", "ip_queue_xmit",
    "__ip_queue_xmit", "ip_output", "ip_finish_output*", "ip6_xmit", "ip6_output", "ip6_finish_output*",
    "*dev_queue_xmit*", "dev_hard_start_xmit", "netif_receive_skb*", "__netif_receive_skb*", "napi_*",
    "sock_sendmsg", "sock_recvmsg", "sock_write_iter", "sock_read_iter", "__sys_sendto", "__sys_recvfrom",
    "do_sys_poll", "do_select", "ep_poll", "*_sys_poll*", "*_sys_select", "*_sys_epoll_wait",
)
# Kernel functions our terminal output passes through before it reaches a socket.
TERMINAL_PATH = (
    "tty_write", "file_tty_write", "iterate_tty_write", "n_tty_write", "n_tty_read", "pty_write",
    "tty_insert_flip_string*", "tty_flip_buffer_push", "tty_port_default_receive_buf", "vfs_write",
    "vfs_read", "ksys_write", "ksys_read", "__x64_sys_write", "__x64_sys_read", "do_writev", "vfs_writev",
    "__x64_sys_writev", "new_sync_write",
)
OUTPUT_PATH = NETWORK_PATH + TERMINAL_PATH
# A served session's screen: the pipe it writes and the server reads, before the server's TCP sends.
RELAY_PATH = ("pipe_write", "pipe_read", "anon_pipe_write", "anon_pipe_read")
# Set by kprobe-tui serve in each session's environment: "<server pid> <the browser's address>".
SERVED_BY = "KPROBE_TUI_SERVED_BY"


# The arguments that hold a socket, as perf's lab captures one (tcp_recvmsg sk) and bcc's and bpftrace's tools name it.
SOCKET_ARGUMENTS = ("sk", "sock")


@dataclass(frozen=True)
class OwnSocket:
    """Our SSH connection's socket, as an event our sshd caused captured it: the filters that keep only it
    (the lab's "your own connection") or leave it out (the golden rule)."""

    name: str
    address: int

    @property
    def keep(self) -> str:
        return f"{self.name} == {self.address:#x}"

    @property
    def leave_out(self) -> str:
        return f"{self.name} != {self.address:#x}"


class SocketSpotter:
    """Finds our SSH connection's socket in the events: the first one caused by our session's sshd (it reads
    what we type and sends what we print) with a socket argument. Looks at an event only when it is sshd's."""

    def __init__(self, session_pids: list[int]) -> None:
        self._pids = frozenset(session_pids)
        self.found: OwnSocket | None = None

    @classmethod
    def of_this_session(cls, environ: Mapping[str, str] = os.environ) -> SocketSpotter:
        return cls(ssh_session_pids() if environ.get("SSH_CONNECTION") else [])

    @property
    def watching(self) -> bool:
        """Over SSH, until the socket is found."""
        return self.found is None and bool(self._pids)

    def see(self, events) -> OwnSocket | None:
        """The socket, the first time a batch of events shows it; None before and after."""
        if not self.watching:
            return None
        for event in events:
            if event.pid in self._pids or event.tgid in self._pids:
                arguments = event.args
                for name in SOCKET_ARGUMENTS:
                    address = arguments.get(name)
                    if isinstance(address, int) and address:
                        self.found = OwnSocket(name, address)
                        return self.found
        return None


@dataclass
class GuardAdvice:
    """What to add to a probe's filter, what to tell the user, and whether they must confirm."""

    filter: str | None  # our PID, and over SSH on the output path the sshd session too
    warnings: list[str] = field(default_factory=list)
    needs_confirmation: bool = False
    session_filter: str | None = None  # the filter that excludes our SSH connection's sshd


def on_output_path(function: str | None, path: tuple[str, ...] = OUTPUT_PATH) -> bool:
    """Whether ``function`` is on ``path`` (by default all of our terminal output's way out)."""
    if not function:
        return False
    return any(fnmatch.fnmatchcase(function, pattern) for pattern in path)


def ssh_session_pids(pid: int | None = None) -> list[int]:
    """The sshd processes above us: they forward our output to the network."""
    try:
        process = psutil.Process(pid or os.getpid())
        return [p.pid for p in process.parents() if p.name().startswith("sshd")]
    except psutil.Error:
        return []


def combine_filters(*expressions: str | None) -> str | None:
    """AND the non-empty filters together, each in parentheses (the kernel's filter grammar)."""
    parts = [e for e in expressions if e]
    if len(parts) <= 1:
        return parts[0] if parts else None
    return " && ".join(f"({e})" for e in parts)


def advise(
    spec: ProbeSpec,
    *,
    exclude_pids: list[int] | None = None,
    environ: Mapping[str, str] = os.environ,
) -> GuardAdvice:
    """The filter and warnings for a probe this process will display events of.

    ``exclude_pids`` defaults to our own PID; pass [] when nobody here displays the events
    (``kprobe-tui probe`` only creates them).
    """
    pids = [os.getpid()] if exclude_pids is None else list(exclude_pids)
    advice = GuardAdvice(None)
    relay = _relay(environ)
    if relay and not spec.is_uprobe and on_output_path(spec.function, relay.path):
        pids += [p for p in relay.pids if p not in pids]
        advice.session_filter = " && ".join(f"common_pid != {pid}" for pid in relay.pids) or None
        advice.needs_confirmation = True
        advice.warnings.append(
            f"{spec.function} is on the path your terminal output takes {relay.how}: each event "
            f"shown causes more events. Filtering by PID excludes {relay.who} and this process, not softirq network work"
            + (f"; your session's filter: {advice.session_filter}" if advice.session_filter else "")
        )
    advice.filter = " && ".join(f"common_pid != {pid}" for pid in pids) or None
    return advice


@dataclass
class _Relay:
    """Who carries our output to the network, in a warning's words, their PIDs and the functions on the way."""

    how: str
    who: str
    pids: list[int]
    path: tuple[str, ...]


def _relay(environ: Mapping[str, str]) -> _Relay | None:
    ssh = environ.get("SSH_CONNECTION")
    if ssh:
        return _Relay(f"over SSH (from {':'.join(ssh.split()[:2])})", "sshd", ssh_session_pids(), OUTPUT_PATH)
    served = environ.get(SERVED_BY, "").split()
    if len(served) != 2 or not served[0].isdigit():
        return None
    # The variable is ours to change: a PID is filtered out only when it is the server above us.
    try:
        above = {p.pid for p in psutil.Process(os.getpid()).parents()}
    except psutil.Error:
        above = set()
    server = [int(served[0])] if int(served[0]) in above else []
    return _Relay(f"to your browser through kprobe-tui serve (to {served[1]})", "the server", server, OUTPUT_PATH + RELAY_PATH)
