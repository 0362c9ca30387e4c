"""Corrupt debug info is a problem with the user's file, said as such: the one place where what the
DWARF and ELF readers raise on bad bytes becomes a UserError naming the file.

pyelftools and our own decoders trust the offsets, lengths and codes they read: a flipped byte shows
up as a KeyError (an unknown abbreviation or form), an IndexError, a struct.error, a DWARFError, a
runaway recursion... anywhere below. Rather than guard every parser, the engine's entry points (what
the commands, the probe compiler and the TUI call) are wrapped with ``reports_corruption``.

The catch is wide on purpose (TypeError and AttributeError included: a None where a DIE should be is
what a corrupt reference looks like), so the message names the original error and says how to tell a
corrupt file from a bug of ours; KPROBE_TUI_DEBUG=1 lets the original exception through.
"""

from __future__ import annotations

import functools
import os
import struct
import weakref
from collections.abc import Callable
from typing import TypeVar

from kprobe_tui.errors import UserError

__all__ = ["file_of_die", "reports_corruption"]

F = TypeVar("F", bound=Callable)

_FILES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # pyelftools DWARFInfo -> the file it reads


class CorruptDebugInfo(UserError):
    """The debug info of a file cannot be read: bytes that do not parse, references that lead nowhere."""


@functools.lru_cache(maxsize=1)
def read_errors() -> tuple[type[BaseException], ...]:
    """What reading a corrupt ELF or DWARF file raises. OSError too: pyelftools seeks wherever a header
    says (a negative offset is EINVAL). Imported when first needed: a warm run answered from the index
    never imports pyelftools."""
    from elftools.common.exceptions import DWARFError, ELFError  # ELFParseError is an ELFError
    from elftools.construct import ConstructError  # here: ~27 ms to import (-X importtime), see above

    return (ELFError, DWARFError, ConstructError, struct.error, KeyError, IndexError, ValueError, TypeError,
            AttributeError, AssertionError, EOFError, OverflowError, ZeroDivisionError, RecursionError, MemoryError,
            OSError)


def register(dwarf, path) -> None:
    """Remember which file a DWARFInfo reads, so an error in a DIE handed out long ago can name it."""
    _FILES[dwarf] = path


def file_of_die(die) -> str:
    return str(_FILES.get(die.dwarfinfo, "a file"))


def reports_corruption(file_of: Callable[..., object]) -> Callable[[F], F]:
    """Decorate an entry point of the engine: what the readers raise on bad bytes becomes
    CorruptDebugInfo naming ``file_of(*args, **kwargs)``; UserErrors pass as they are."""

    def decorate(function: F) -> F:
        @functools.wraps(function)
        def guarded(*args, **kwargs):
            try:
                return function(*args, **kwargs)
            except UserError:
                raise
            except read_errors() as exc:
                if os.environ.get("KPROBE_TUI_DEBUG"):
                    raise
                path = file_of(*args, **kwargs)
                detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                raise CorruptDebugInfo(
                    f"debug info of {path} is corrupt ({detail[:200]})",
                    f"rebuild it, or reinstall its debug package; if `readelf --debug-dump {path}` reads it "
                    "without complaint, this is a kprobe-tui bug: rerun with KPROBE_TUI_DEBUG=1 and report it",
                ) from exc

        return guarded  # type: ignore[return-value]

    return decorate
