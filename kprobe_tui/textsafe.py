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
# unassigned there); tests/unit/test_textsafe.py checks this class against unicodedata, so a newer
# Python's additions are noticed.
_UNSAFE_CLASS = (
    "\x00-\x1f\x7f-\x9f\xad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f"
    "\u2028-\u202e\u2060-\u2064\u2066-\u206f\ud800-\udfff\ufeff\ufff9-\ufffb\U000110bd\U000110cd"
    "\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f"
)
_SURROGATE_ESCAPES = range(0xDC80, 0xDD00)  # what surrogateescape makes of the bytes 0x80-0xFF
_patterns: dict[str, re.Pattern[str]] = {}


def _pattern(keep: str) -> re.Pattern[str]:
    pattern = _patterns.get(keep)
    if pattern is None:
        kept = "".join(re.escape(char) for char in keep)
        pattern = _patterns[keep] = re.compile(f"(?![{kept}])[{_UNSAFE_CLASS}]" if kept else f"[{_UNSAFE_CLASS}]")
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
    if text.isascii() and text.isprintable():  # the usual case, decided in C: no copy
        return text
    pattern = _pattern(keep)
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
