"""Text from outside for widgets: a rich ``Text`` (never parsed as markup) with every control escaped.

Symbol names, paths, captured strings, DWARF names and kernel messages go through ``plain`` before a
widget, a notification or a title shows them: ``[/]close`` stays those characters instead of closing
a markup tag, and ``ESC ] 0 ;`` reaches the screen as ``\\x1b]0;`` instead of the terminal.
"""

from __future__ import annotations

from rich.style import Style
from rich.text import Text

from kprobe_tui.textsafe import printable


def plain(text: str, style: str | Style = "") -> Text:
    """``text`` as literal characters: controls escaped (newlines kept: a message may have lines)."""
    return Text(printable(text, keep="\n"), style=style)
