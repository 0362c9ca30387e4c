"""Untrusted text made safe to show on a terminal: every invisible or controlling character as an escape.

What we print comes from places we do not control: strings read out of a traced program's memory,
ELF symbol names, DWARF names and source files, snapshot archives, kallsyms, paths. A terminal
obeys what it is sent: ``ESC ] 0 ; title BEL`` retitles it, ``ESC [ 2 J`` clears it, and other
sequences answer back into its input. So every printer and widget shows such text through
``printable``, which turns each of these characters into a visible Python-style escape:

- C0 controls (U+0000-U+001F, ESC included), DEL (U+007F) and the C1 controls (U+0080-U+009F:
  U+009B is a one-character CSI to terminals that honour 8-bit controls);
- Unicode format characters (category Cf): the bidi overrides and isolates (U+202A-U+202E,
  U+2066-U+2069), which make text display in an order other than the one it has ("Trojan Source"),
  and the zero-width ones (U+200B-U+200D, U+2060, U+FEFF), which make two different names look
  alike. A debugging tool shows what is there, so all of Cf is escaped, not only the dangerous;
- the line and paragraph separators (U+2028, U+2029), which some terminals and viewers break on;
- lone surrogates: undecodable bytes kept by ``errors="surrogateescape"`` show as the byte they
  were (``\\xNN``), and would otherwise fail to encode for output.

A backslash is left as it is, so an escape in the output is ambiguous with the same characters
in the text: ``--json`` output is exact when that matters. Callers keep the structure they mean
(``keep="\\n\\t"`` for a source listing); a newline inside a captured string becomes ``\\n``.
"""

from __future__ import annotations

import re

# Category Cc, Cf, Cs, Zl and Zp as of Unicode 15 (Python 3.11 knows 14: U+13439-U+1343F are still
# unassigned there); tests/unit/test_textsafe.py checks these ranges against unicodedata, so a newer
# Python's additions are noticed.
_UNSAFE_RANGES = (
    (0x00, 0x1F), (0x7F, 0x9F), (0xAD, 0xAD), (0x600, 0x605), (0x61C, 0x61C), (0x6DD, 0x6DD), (0x70F, 0x70F),
    (0x890, 0x891), (0x8E2, 0x8E2), (0x180E, 0x180E), (0x200B, 0x200F), (0x2028, 0x202E), (0x2060, 0x2064),
    (0x2066, 0x206F), (0xD800, 0xDFFF), (0xFEFF, 0xFEFF), (0xFFF9, 0xFFFB), (0x110BD, 0x110BD), (0x110CD, 0x110CD),
    (0x13430, 0x1343F), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A), (0xE0001, 0xE0001), (0xE0020, 0xE007F),
)
_SURROGATE_ESCAPES = range(0xDC80, 0xDD00)  # what surrogateescape makes of the bytes 0x80-0xFF
_patterns: dict[tuple[str, bool], re.Pattern[str]] = {}


def _pattern(keep: str, ascii_only: bool = False) -> re.Pattern[str]:
    """One character class of the unsafe ranges less the kept characters. (A lookahead per character
    made a tail batch's scan 4x slower; for ASCII text the class of ASCII controls alone is 6x faster
    than the whole one.)"""
    pattern = _patterns.get((keep, ascii_only))
    if pattern is None:
        kept = sorted(ord(char) for char in keep)
        pieces = []
        for low, high in _UNSAFE_RANGES[:2] if ascii_only else _UNSAFE_RANGES:
            high = min(high, 0x7F) if ascii_only else high
            for code in kept:
                if low <= code <= high:
                    if low < code:
                        pieces.append((low, code - 1))
                    low = code + 1
            if low <= high:
                pieces.append((low, high))
        pattern = _patterns[keep, ascii_only] = re.compile(
            "[" + "".join(re.escape(chr(low)) + ("-" + re.escape(chr(high)) if high > low else "") for low, high in pieces) + "]")
    return pattern


_SHORT = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _SHORT:
        return _SHORT[char]
    code = ord(char)
    if code in _SURROGATE_ESCAPES:
        return f"\\x{code - 0xDC00:02x}"
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(text: str, keep: str = "") -> str:
    """``text`` with every control, format and separator character (but those in ``keep``) escaped."""
    ascii_only = text.isascii()
    if ascii_only and text.isprintable():  # the usual case, decided in C: no copy
        return text
    pattern = _pattern(keep, ascii_only)
    if pattern.search(text) is None:
        return text
    return pattern.sub(_escape, text)


class PrintableStream:
    """A text stream that passes only printable text (and newlines and tabs) to the one it wraps.

    The CLI wraps stdout and stderr in one of these, so no printer can send a terminal a control
    sequence by forgetting to escape; printers still escape fields where a newline would forge a line.
    """

    def __init__(self, stream) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(printable(text, keep="\n\t"))
        return len(text)

    def __getattr__(self, name: str):
        return getattr(self.stream, name)  # flush, fileno, isatty, encoding...
