"""The host side of the kernel tests: boot each Debian kernel under QEMU and run ``-m kernel`` inside.

This machine's kernel has no kprobes, so without these the kernel half of kprobe-tui is never run
for real. A guest whose pytest fails, collects nothing, or never reports fails the host test.
"""

from __future__ import annotations

import io
import os
import re
import sys

import harness
import pytest


class _Tee(io.TextIOBase):
    """Console lines go to pytest's captured stdout (shown on failure) and are kept for the checks."""

    def __init__(self) -> None:
        self.text = io.StringIO()

    def write(self, text: str) -> int:
        sys.stdout.write(text)
        return self.text.write(text)

    def flush(self) -> None:
        sys.stdout.flush()


@pytest.mark.skipif(bool(os.environ.get(harness.IN_GUEST_ENV)), reason="already inside a guest")
@pytest.mark.parametrize("name", sorted(harness.KERNELS))
def test_kernel_tests_pass_inside_guest(name):
    reason = harness.missing_host_tools()
    if reason:
        pytest.skip(reason)
    console = _Tee()
    status = harness.boot(harness.KERNELS[name], harness.pytest_argv(harness.DEFAULT_SELECTION), out=console)
    summary = console.text.getvalue()
    assert status == 0, f"pytest inside the {name} guest exited {status} (its output is above)"
    assert re.search(r"\b\d+ passed\b", summary), f"no test passed inside the {name} guest"
