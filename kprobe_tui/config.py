"""The user's remembered choices, and the theme files they choose from.

Pure (no textual): the command line validates ``--theme`` before any UI is imported.

Themes are data: ``themes/default.tcss`` holds the layout and refers to colours only through Textual's
theme variables ($primary, $text-muted, ...); each ``themes/<name>.toml`` is the handful of base
colours a ``textual.theme.Theme`` takes, from which Textual derives every shade the layout uses. So a
new theme is one small file and cannot break the layout, and the command palette can switch themes
live (a TCSS file per theme would need a stylesheet reload and would duplicate the layout).
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from kprobe_tui.errors import UserError
from kprobe_tui.files import NoSuchFile, read_regular

DEFAULT_THEME = "dark"
NO_COLOR_THEME = "monochrome"
MAX_CONFIG = 1 << 20  # a few settings: anything bigger is not our file
_SETTING_KEY = re.compile(r"[A-Za-z0-9_-]+", re.ASCII)  # a bare TOML key: what save writes unquoted
_PACKAGE = Path(__file__).resolve().parent


def themes_dir() -> Path:
    """themes/ beside the package in a checkout; installed wheels carry it as kprobe_tui/themes."""
    for directory in (_PACKAGE.parent / "themes", _PACKAGE / "themes"):
        if (directory / "default.tcss").exists():
            return directory
    raise FileNotFoundError("themes/default.tcss is missing from this installation")


def theme_names() -> list[str]:
    return sorted(path.stem for path in themes_dir().glob("*.toml"))


@dataclass(frozen=True)
class ThemeSpec:
    """One theme file: ``colours`` are textual.theme.Theme's fields; ``monochrome`` asks the app to
    draw every cell in the terminal's own two colours (normal or reversed), whatever the layout says."""

    name: str
    colours: dict = field(default_factory=dict)
    monochrome: bool = False


def load_theme(name: str) -> ThemeSpec:
    """A theme by name; an unknown name is a UserError listing the installed ones."""
    import tomllib  # imported when a theme is read: every command line names the theme option, few read one

    path = themes_dir() / f"{name}.toml"
    if not name or "/" in name or not path.exists():
        raise UserError(f"no theme named {name!r}", f"choose one of: {', '.join(theme_names())}")
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise UserError(f"theme file {path} is unreadable: {exc}", "reinstall kprobe-tui or fix the file") from None
    monochrome = bool(data.pop("monochrome", False))
    return ThemeSpec(name, data, monochrome)


def config_path() -> Path:
    """$XDG_CONFIG_HOME/kprobe-tui/config.toml (default ~/.config)."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "kprobe-tui" / "config.toml"


def load(path: Path | None = None) -> tuple[dict, str | None]:
    """The saved settings and what was wrong with them: a missing file is empty, a broken one is
    ignored with a warning for the user (never a crash), and replaced when a setting is next saved."""
    import tomllib  # here: ~4 ms to import (-X importtime); only the TUI reads the file

    path = path or config_path()
    try:
        settings = tomllib.loads(read_regular(path, "config file", MAX_CONFIG).decode())
    except NoSuchFile:
        return {}, None
    except UserError as exc:
        return {}, f"ignored the {exc.message}"
    except (OSError, ValueError, RecursionError) as exc:  # not UTF-8, not TOML, an integer of over 4300 digits,
        # arrays nested past Python's recursion limit (tomllib recurses: "x = [[[[..." 100k deep)
        return {}, f"ignored the config file {path}: it is corrupt ({exc}); fix or delete it"
    for key, value in settings.items():
        if not _SETTING_KEY.fullmatch(key) or not _flat(value):
            return {}, (f"ignored the config file {path}: it is corrupt ({key!r} is not a setting: kprobe-tui "
                        "writes name = string, number or true/false); fix or delete it")
    return settings, None


def _flat(value) -> bool:
    """What ``save`` writes back as it was: a TOML date, table or array, or nan, would come back broken."""
    return isinstance(value, (str, int)) or isinstance(value, float) and math.isfinite(value)


def _toml_value(value) -> str:
    """A string, number or bool in TOML: JSON's spelling, less its one difference (TOML wants DEL escaped;
    ``ensure_ascii`` would write an emoji as a surrogate pair, which TOML refuses)."""
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


def save(settings: dict, path: Path | None = None) -> None:
    """Write flat string/number/bool settings atomically: a crash mid-write leaves the old file whole."""
    path = path or config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    import tempfile  # here: ~3.5 ms to import (-X importtime); only a saved setting needs it

    text = "".join(f"{key} = {_toml_value(value)}\n" for key, value in sorted(settings.items()))
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".config-", suffix=".toml")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def remember(key: str, value, path: Path | None = None) -> str | None:
    """Change one setting, keeping the others (a broken file is replaced). Returns why it could not be
    saved, if so: a read-only home must not stop the UI."""
    settings, _ = load(path)
    settings[key] = value
    try:
        save(settings, path)
    except OSError as exc:
        return f"could not remember {key} in {path or config_path()}: {exc.strerror or exc}"
    return None


def choose_theme(requested: str | None, path: Path | None = None) -> tuple[str, list[str]]:
    """--theme, else the remembered theme, else monochrome under NO_COLOR, else the dark default;
    and the warnings to show the user.

    As no-color.org asks, an explicit choice (argument or config file) overrides NO_COLOR. A remembered
    theme that no longer exists is a warning, not a failure.
    """
    if requested is not None:
        load_theme(requested)  # validates: UserError naming the themes
        return requested, []
    settings, problem = load(path)
    problems = [problem] if problem else []
    remembered = settings.get("theme")
    if remembered is not None:
        if remembered in theme_names():
            return remembered, problems
        problems.append(f"the remembered theme {remembered!r} does not exist (themes: {', '.join(theme_names())})")
    return (NO_COLOR_THEME if os.environ.get("NO_COLOR") else DEFAULT_THEME), problems
