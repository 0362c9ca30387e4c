"""The hostile program of tests/live/c/hostile.c, built for a test: escapes in its strings, its source
and its symbol names (shared by the live CLI tests and the TUI tests)."""

from __future__ import annotations

import subprocess
from pathlib import Path

SOURCE = Path(__file__).parent / "c" / "hostile.c"
ESCAPES = "\x1b]0;title\x07\x1b[2J"  # retitles, then clears, a terminal that obeys it
MARKUP = "[/]close [link=https://example.com]x[/link] [@click=app.quit]q"
SAID = [ESCAPES, MARKUP, "\u202eolleh"]  # what main() passes to shout(), in order
RENAMED = {  # symbol names the built program carries instead (DWARF keeps the C names)
    "renamed_escape": f"esc{ESCAPES}",
    "renamed_close": "[/]close",
    "renamed_click": "[link=https://example.com]click[/link]",  # ("@" cannot be shown: it starts a symbol version)
}
PLACEHOLDERS = {"@ESC@": "\x1b", "@BEL@": "\x07", "@FF@": "\x0c", "@LS@": "\u2028"}
FORBIDDEN = ("\x1b]0;title", "\x07", "\x1b[2J", "\u202e")  # none of these may reach a terminal


def build_hostile(directory: Path, *flags: str) -> Path:
    """The program, its source (with the raw characters) beside it, symbols renamed."""
    text = SOURCE.read_text()
    for placeholder, char in PLACEHOLDERS.items():
        text = text.replace(placeholder, char)
    source = directory / "hostile.c"
    source.write_text(text)
    binary = directory / "hostile"
    subprocess.run(["gcc", "-O0", "-g", *flags, "-o", str(binary), str(source)], check=True)
    renames = [f"--redefine-sym={old}={new}" for old, new in RENAMED.items()]
    subprocess.run(["objcopy", *renames, str(binary)], check=True)
    return binary
