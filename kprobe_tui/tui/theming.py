"""The theme files of themes/ as Textual themes, and the filter that makes "monochrome" really so.

Textual derives tints from every base colour ($primary 40% borders, muted text), so a theme of only
black and white still paints greys. A monochrome theme therefore also turns on ``TwoTone``: each cell
is drawn with no colour at all (the terminal's own foreground on its background), reversed where the
layout highlights it, keeping bold, italic and underline.
"""

from __future__ import annotations

from functools import lru_cache

from rich.segment import Segment
from rich.style import Style
from textual.color import Color
from textual.filter import LineFilter
from textual.theme import Theme

from kprobe_tui import config

HIGHLIGHT_BRIGHTNESS = 0.5  # a background brighter than this (on black) is a highlight: reverse it
# The layout of every screen and widget. The app loads it, and so does each screen (CSS_PATH: read
# once, whoever asks first), so a screen hosted alone by a bare Textual app (tests, benchmarks) looks the same.
LAYOUT = config.themes_dir() / "default.tcss"


@lru_cache(1024)
def _two_tone(style: Style) -> Style:
    highlighted = style.bgcolor is not None and Color.from_rich_color(style.bgcolor).brightness > HIGHLIGHT_BRIGHTNESS
    plain = style.without_color
    return plain + Style(reverse=not plain.reverse) if highlighted else plain


class TwoTone(LineFilter):
    """Every colour dropped; highlighted backgrounds become reverse video."""

    def apply(self, segments: list[Segment], background: Color) -> list[Segment]:
        return [Segment(text, None if style is None else _two_tone(style), control)
                for text, style, control in segments]


def textual_themes() -> dict[str, tuple[Theme, bool]]:
    """Every theme file as (Textual theme, whether it is monochrome), by name."""
    themes = {}
    for name in config.theme_names():
        spec = config.load_theme(name)
        themes[name] = (Theme(name=name, **spec.colours), spec.monochrome)
    return themes
