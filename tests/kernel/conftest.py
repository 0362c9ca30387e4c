"""Fixtures for the in-guest kernel tests (``@pytest.mark.kernel``), run by ``harness.py`` inside QEMU."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from harness import IN_GUEST_ENV

from kprobe_tui.kernel.sources import KernelSources, locate
from kprobe_tui.kernel.tracefs import Tracefs


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Inside a guest, kprobes must be there: a kernel test skipped for lack of them would hide a broken guest."""
    if not os.environ.get(IN_GUEST_ENV):
        return
    sources = locate()
    if sources.tracefs is None or not (sources.tracefs / "kprobe_events").exists():
        raise pytest.UsageError(f"guest kernel {os.uname().release} has no tracefs kprobe_events: the guest is broken")


@pytest.fixture(scope="session")
def guest_sources() -> KernelSources:
    return locate()


def _kernel_state(root: Path) -> dict[str, str]:
    state = {name: (root / name).read_text() for name in ("kprobe_events", "dynamic_events")}
    state["instances"] = " ".join(sorted(os.listdir(root / "instances")))
    return state


@pytest.fixture
def tracefs(guest_sources) -> Tracefs:
    """The guest's tracefs; the test fails if it leaves a probe, a dynamic event or an instance behind."""
    root = guest_sources.tracefs
    before = _kernel_state(root)
    yield Tracefs(root)
    assert _kernel_state(root) == before, "the test left something in the kernel"
