"""A bound on the memory a test's code may take: the process's address space, a little above what it holds.

RLIMIT_AS, not resident memory: a parser that allocates what a header claims fails at once with
MemoryError (no UserError: a test of clean refusals fails on it), before it could touch the pages.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Iterator
from contextlib import contextmanager


def address_space() -> int:
    """Bytes of address space this process holds now (/proc/self/statm's first field, in pages)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


@contextmanager
def memory_bound(extra: int) -> Iterator[None]:
    """Within the block, at most ``extra`` bytes more address space than at its start (the old limit after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    bound = address_space() + extra
    resource.setrlimit(resource.RLIMIT_AS, (bound if hard == resource.RLIM_INFINITY else min(bound, hard), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
