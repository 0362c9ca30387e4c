"""``<...>`` events named from the same pid's other events, /proc, then saved_cmdlines (stream/comms.py)."""

from __future__ import annotations

from kprobe_tui.stream.comms import UNKNOWN_COMM, CommNames
from kprobe_tui.stream.parser import Event


def event(pid: int, comm: str = UNKNOWN_COMM) -> Event:
    return Event(1.0, 0, pid, None, comm, "", "work_L3", "(0x1157)")


def names(events: list[Event]) -> list[str]:
    return [e.comm for e in events]


def test_a_pid_named_later_in_the_batch_names_its_first_events(tmp_path):
    comms = CommNames(lambda: "", proc=str(tmp_path))
    assert names(comms.name([event(7), event(7), event(7, "lab_walk"), event(8)])) == \
        ["lab_walk", "lab_walk", "lab_walk", UNKNOWN_COMM]
    assert names(comms.name([event(7)])) == ["lab_walk"]  # remembered for the next batch


def test_a_live_process_is_named_by_proc_then_an_exited_one_by_saved_cmdlines(tmp_path):
    (tmp_path / "41").mkdir()
    (tmp_path / "41" / "comm").write_text("sshd\n")
    reads = []

    def saved_cmdlines() -> str:
        reads.append(1)
        return "42 lab_walk\n43 a b-c\n"

    comms = CommNames(saved_cmdlines, proc=str(tmp_path))
    assert names(comms.name([event(41), event(42), event(43), event(44)])) == ["sshd", "lab_walk", "a b-c",
                                                                                UNKNOWN_COMM]
    assert len(reads) == 1  # once per batch, not per event


def test_an_unreadable_saved_cmdlines_leaves_the_event_unnamed(tmp_path):
    def denied() -> str:
        raise PermissionError("saved_cmdlines")

    assert names(CommNames(denied, proc=str(tmp_path)).name([event(9)])) == [UNKNOWN_COMM]
