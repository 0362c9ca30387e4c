"""textsafe: nothing a terminal obeys or hides passes, everything else is kept as it is."""

from __future__ import annotations

import io
import random
import unicodedata

from kprobe_tui.textsafe import PrintableStream, printable

UNSAFE_CATEGORIES = {"Cc", "Cf", "Cs", "Zl", "Zp"}


def test_the_escaped_set_is_the_control_format_and_separator_categories():
    """Checked against this Python's Unicode database: a newer one's new format characters show up here.
    Beyond them only characters this database does not know yet (Unicode 15's format characters) are escaped."""
    missed, extra = [], []
    for code in range(0x110000):
        category = unicodedata.category(chr(code))
        escaped = printable(chr(code)) != chr(code)
        if category in UNSAFE_CATEGORIES and not escaped:
            missed.append(hex(code))
        elif escaped and category not in UNSAFE_CATEGORIES and category != "Cn":
            extra.append(hex(code))
    assert (missed, extra) == ([], [])


def test_terminal_sequences_become_visible_escapes():
    hostile = "\x1b]0;title\x07\x1b[2J\x9b31m\x7f"
    assert printable(hostile) == "\\x1b]0;title\\x07\\x1b[2J\\x9b31m\\x7f"
    assert printable("a\nb\tc") == "a\\nb\\tc"
    assert printable("a\nb\tc\rd", keep="\n\t") == "a\nb\tc\\rd"


def test_bidi_overrides_and_invisible_characters_are_shown():
    assert printable("access\u202e\u2066check") == "access\\u202e\\u2066check"
    assert printable("work\u200b") == "work\\u200b"
    assert printable("tag\U000e0041") == "tag\\U000e0041"


def test_undecodable_bytes_show_as_the_bytes_they_were():
    raw = b"name\xff\xfe".decode("utf-8", errors="surrogateescape")
    assert printable(raw) == "name\\xff\\xfe"
    assert printable(raw).encode("utf-8")  # encodable: no UnicodeEncodeError on output


def test_printable_text_is_kept_as_is():
    for text in ("tcp_recvmsg", "café(int n)", "日本語 ü → ⏎", "[/]close [link=x] \\x1b", "a b"):
        assert printable(text) is text or printable(text) == text


def test_random_strings_never_carry_a_control_character():
    rng = random.Random(15)
    alphabet = [chr(c) for c in (*range(0x00, 0x100), 0x202E, 0x2066, 0x200B, 0xFEFF, 0xDCFF, 0x2028, 0x1F600)]
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 40)))
        shown = printable(text)
        assert not any(unicodedata.category(char) in UNSAFE_CATEGORIES for char in shown), repr(text)


def test_the_stream_wrapper_escapes_all_but_newlines_and_tabs():
    out = io.StringIO()
    stream = PrintableStream(out)
    assert stream.write("ok\t\x1b[2J\n") == len("ok\t\x1b[2J\n")
    assert out.getvalue() == "ok\t\\x1b[2J\n"
