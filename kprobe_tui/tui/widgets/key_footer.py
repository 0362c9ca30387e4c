"""Textual's footer, with the help key always on screen."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.widgets import Footer
from textual.widgets._footer import FooterKey


class KeyFooter(Footer):
    """The footer with ``? Help`` docked at its right, beside the palette's key.

    Textual's footer lists the focused widget's keys, then the screen's, then the app's, and cuts what does not
    fit: at 80 columns the app's Help was cut on every screen. Help lists every key of the screen, so it is the
    one key that must never be cut. A click on it presses F1, which opens help even from a text field.
    """

    DEFAULT_CSS = """
    KeyFooter FooterKey.-help {
        dock: right;
        border-left: vkey $foreground 20%;
    }
    """

    def compose(self) -> ComposeResult:
        yield from super().compose()
        if self._bindings_ready:
            yield FooterKey("f1", "?", "Help", "app.help", classes="-help").data_bind(compact=Footer.compact)
