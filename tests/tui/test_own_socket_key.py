"""``o`` on the events screen over SSH: once an event our sshd caused shows our connection's socket, it is said
and ``o`` filters to it, ``o`` again leaves it out. The real SSH session is in the 6.1 guest
(tests/kernel/test_student_guest.py); here the screen's part, on replayed events and our sshd's PID given."""

from __future__ import annotations

from collections import Counter

from kprobe_tui.kernel.sources import locate
from kprobe_tui.probes.guard import SocketSpotter
from kprobe_tui.stream.parser import Event
from kprobe_tui.stream.reader import StreamUpdate
from kprobe_tui.tui.app import KprobeTui
from kprobe_tui.tui.screens.events import EventsScreen, Ingested
from tests.tui.states import until

SSHD, OURS, THEIRS = 4100, 0xFFFF88800A1B2C00, 0xFFFF88800BADF000


def recv(pid: int, comm: str, sk: int) -> Event:
    return Event(3.5, 0, pid, pid, comm, "....", "tcp_recvmsg_sk", f"(tcp_recvmsg+0x0/0x2b0) sk={sk:#x}")


async def test_o_keeps_our_connection_then_leaves_it_out():
    stored = [recv(77, "curl", THEIRS), recv(SSHD, "sshd", OURS), recv(77, "curl", THEIRS), recv(SSHD, "sshd", OURS)]
    app = KprobeTui(locate())
    async with app.run_test(size=(80, 24)) as pilot:
        screen = EventsScreen.replay(stored)
        await app.push_screen(screen)
        await pilot.press("o")  # nothing seen yet: said how to get there
        await until(pilot, lambda: any("type a key" in note.message for note in app._notifications), "not yet is said")
        screen.spotter = SocketSpotter([SSHD])  # as if the reader had just brought them
        screen.post_message(Ingested(StreamUpdate(len(stored), Counter(), 0.05, 0, 0)))
        await until(pilot, lambda: screen.spotter.found is not None, "our socket is seen")
        assert any(f"socket is sk={OURS:#x}" in note.message for note in app._notifications)
        await pilot.press("o")
        await until(pilot, lambda: screen.store.view_len() == 2, "only our connection's events")
        assert {event.pid for event in screen.store.view_rows(0, 2)} == {SSHD}
        await pilot.press("o")
        await until(pilot, lambda: screen.store.view_len() == 2 and screen.store.view_row(0).pid == 77, "ours left out")
