"""The golden rule for the lab's own connection: our sshd's socket, seen in the events it causes, is offered as
the filter that keeps only it (the lab's ``--filter 'sk == 0x...'``) or leaves it out."""

from __future__ import annotations

from kprobe_tui.probes.guard import SocketSpotter
from kprobe_tui.stream.filterexpr import compile_filter, parse
from kprobe_tui.stream.parser import Event

SSHD = 4100
OURS = 0xFFFF88800A1B2C00


def event(pid: int, body: str, comm: str = "sshd") -> Event:
    return Event(12.5, 0, pid, pid, comm, "....", "tcp_recvmsg_sk", body)


def test_the_socket_of_an_event_our_sshd_caused_is_found_once_and_filters_it():
    spotter = SocketSpotter([SSHD, SSHD - 1])
    assert spotter.see([event(77, "(tcp_recvmsg+0x0/0x2b0) sk=0xffff88800badf00d", comm="curl"),
                        event(SSHD, "(tcp_recvmsg+0x0/0x2b0) len=36"),
                        event(SSHD, "(tcp_recvmsg+0x0/0x2b0) sk=0x0")]) is None  # another's; none captured; NULL
    own = spotter.see([event(SSHD, f"(tcp_recvmsg+0x0/0x2b0) sk={OURS:#x}")])
    assert own is not None and (own.name, own.address) == ("sk", OURS)
    assert own.keep == f"sk == {OURS:#x}" and own.leave_out == f"sk != {OURS:#x}"
    assert not spotter.watching and spotter.see([event(SSHD, "sk=0x1")]) is None and spotter.found == own
    mine, theirs = event(SSHD, f"sk={OURS:#x}"), event(77, "sk=0xffff88800badf00d", comm="curl")
    keep, leave_out = compile_filter(parse(own.keep)), compile_filter(parse(own.leave_out))
    assert (keep(mine), keep(theirs), leave_out(mine), leave_out(theirs)) == (True, False, False, True)


def test_without_an_ssh_session_nothing_is_watched():
    assert not SocketSpotter([]).watching
    assert not SocketSpotter.of_this_session({}).watching
    assert SocketSpotter([]).see([event(SSHD, f"sk={OURS:#x}")]) is None
