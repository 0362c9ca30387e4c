"""One question at a time per debug file: the engine's entry points hold their DebugInfo's lock.

Below ``scope`` (the DebugInfo) and ``lines`` (whose entry points ``scope`` calls): both decorate with it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

__all__ = ["one_question_at_a_time"]

F = TypeVar("F", bound=Callable)


def one_question_at_a_time(function: F) -> F:
    """An entry point of the engine whose first argument is a DebugInfo: it holds the file's lock."""

    @functools.wraps(function)
    def asked(info, *args, **kwargs):
        with info.asking():
            return function(info, *args, **kwargs)

    return asked  # type: ignore[return-value]
