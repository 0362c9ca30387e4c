"""Strategies that reach a parser's deep branches: valid examples, mutated.

Random text is refused at its first character; a valid spec, trace line or ELF header with a few
edits gets past the first checks and into the code that trusts what they checked. Sizes stay
bounded (a few KB of text, the example's bytes plus a little), so memory is never the question.
"""

from __future__ import annotations

import functools
import os
import struct
from collections.abc import Callable, Sequence

from hypothesis import settings
from hypothesis import strategies as st

from tests.memory_bound import memory_bound

# KPROBE_TUI_PROPERTY_SCALE=10: ten times the examples of every test (a longer hunt than CI's).
SCALE = int(os.environ.get("KPROBE_TUI_PROPERTY_SCALE", "1"))

# What breaks parsers: separators, quotes, brackets, escapes, a newline and a NUL, the byte the kernel
# takes for a space (U+00A0), a lone surrogate (what a non-UTF-8 argv byte decodes to), a number past
# Python's 4300-digit int() limit.
HOSTILE_TOKENS = (
    " ", "\n", "\r", "\t", "\x00", "#", "\\", '"', "'", "(", ")", "[", "]", "{", "}", ":", ";", "=", ",", ".",
    "%", "$", "@", "-", "+", "*", "?", "!", "&", "|", "~", "<", ">", "/", "0x", "-0x", "0", "4294967296",
    "18446744073709551616", "\xa0", "\u2028", "é", "\udcff", "1" * 4400,
)


# What one example may add to the process's address space: a parser that allocates what a header
# claims (a section's 1000 MiB, 2^32 entries) fails with MemoryError, which is no UserError, instead
# of passing. The suite passes at 128 MiB (an xz archive the test writes takes lzma's ~94 MiB; at 32
# MiB only that test fails) and fails at 64 MiB; twice that for a machine whose libraries map more.
MEMORY_BOUND = 256 << 20


def examples(count: int) -> Callable[[Callable], Callable]:
    """``count`` examples (times KPROBE_TUI_PROPERTY_SCALE), on top of the loaded profile, each within MEMORY_BOUND.

    Applied above @given: the bound is put around each example through the test's ``hypothesis.inner_test``
    (Hypothesis' way to wrap what it runs), so Hypothesis' own bookkeeping between examples is outside it."""

    def decorate(test: Callable) -> Callable:
        test = settings(max_examples=count * SCALE)(test)
        inner = test.hypothesis.inner_test  # type: ignore[attr-defined]

        @functools.wraps(inner)
        def bounded(*args, **kwargs):
            with memory_bound(MEMORY_BOUND):
                return inner(*args, **kwargs)

        test.hypothesis.inner_test = bounded  # type: ignore[attr-defined]
        return test

    return decorate


@st.composite
def _edit_text(draw, text: str, pieces: st.SearchStrategy[str], donors: Sequence[str]) -> str:
    start = draw(st.integers(0, len(text)))
    end = draw(st.integers(start, min(len(text), start + 16)))
    edit = draw(st.sampled_from(("insert", "delete", "replace", "repeat", "splice")))
    if edit == "insert":
        return text[:start] + draw(pieces) + text[start:]
    if edit == "delete":
        return text[:start] + text[end:]
    if edit == "replace":
        return text[:start] + draw(pieces) + text[end:]
    if edit == "repeat":  # nesting, long chains, many fields: up to 4000 characters more
        span = text[start:end]
        return text[:start] + span * draw(st.integers(2, 2 + 4000 // max(len(span), 1))) + text[end:]
    donor = draw(st.sampled_from(donors))
    cut = draw(st.integers(0, len(donor)))
    return text[:start] + donor[cut : cut + draw(st.integers(0, 40))] + text[end:]


def mutated_text(valid: Sequence[str], tokens: Sequence[str] = (), max_edits: int = 4) -> st.SearchStrategy[str]:
    """A valid example with up to ``max_edits`` edits: text, ``tokens`` of its language, hostile tokens."""
    pieces = st.one_of(st.sampled_from(tokens or HOSTILE_TOKENS), st.sampled_from(HOSTILE_TOKENS), st.text(max_size=8))

    @st.composite
    def build(draw) -> str:
        text = draw(st.sampled_from(valid))
        for _ in range(draw(st.integers(0, max_edits))):
            text = draw(_edit_text(text, pieces, valid))
        return text

    return build()


def text_inputs(valid: Sequence[str], tokens: Sequence[str] = ()) -> st.SearchStrategy[str]:
    """Mostly mutated examples, some plain random text."""
    return st.one_of(mutated_text(valid, tokens), st.text(max_size=200))


# Integers that make offsets, sizes and counts lie: zero, one, the sign bits, all ones.
_BOUNDARIES = (0, 1, 2, 3, 4, 7, 8, 0x7F, 0x80, 0xFF, 0x7FFF, 0x8000, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF,
               0x7FFFFFFFFFFFFFFF, 0x8000000000000000, 0xFFFFFFFFFFFFFFFF)


@st.composite
def _edit_bytes(draw, data: bytes, hot: Sequence[range]) -> bytes:
    area = draw(st.sampled_from([*hot, range(len(data) + 1)])) if hot else range(len(data) + 1)
    at = draw(st.sampled_from(area)) if len(area) else 0
    at = min(at, len(data))
    edit = draw(st.sampled_from(("field", "field", "field", "flip", "truncate", "insert", "delete")))
    if edit == "field":  # an offset, size, count or kind: replaced by a boundary or anything
        width = draw(st.sampled_from((1, 2, 4, 8)))
        at -= at % width
        value = draw(st.one_of(st.sampled_from(_BOUNDARIES), st.integers(0, 1 << 64), st.just(len(data)),
                               st.just(len(data) + 1))) & ((1 << (8 * width)) - 1)
        order = draw(st.sampled_from("<>"))
        field = struct.pack(order + {1: "B", 2: "H", 4: "I", 8: "Q"}[width], value)
        return data[:at] + field + data[at + width :]
    if edit == "flip":
        if at >= len(data):
            return data
        return data[:at] + bytes([data[at] ^ (1 << draw(st.integers(0, 7)))]) + data[at + 1 :]
    if edit == "truncate":
        return data[:at]
    if edit == "insert":
        return data[:at] + draw(st.binary(max_size=16)) + data[at:]
    return data[:at] + data[at + draw(st.integers(1, 64)) :]


def mutated_bytes(valid: Sequence[bytes], hot: Sequence[range] = (), max_edits: int = 6) -> st.SearchStrategy[bytes]:
    """A valid blob with up to ``max_edits`` edits, mostly of its fields; ``hot``: where its headers are."""

    @st.composite
    def build(draw) -> bytes:
        data = draw(st.sampled_from(valid))
        for _ in range(draw(st.integers(1, max_edits))):
            data = draw(_edit_bytes(data, hot))
        return data

    return build()
