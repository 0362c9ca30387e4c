"""The config file and the theme files: remembered, validated, never a crash."""

from __future__ import annotations

import pytest

from kprobe_tui import config
from kprobe_tui.cli import main
from kprobe_tui.errors import UserError

THEMES = ["dark", "high-contrast", "light", "monochrome"]


def test_theme_files_are_the_four_themes_and_all_load():
    assert config.theme_names() == THEMES
    specs = {name: config.load_theme(name) for name in THEMES}
    assert [name for name, spec in specs.items() if spec.monochrome] == ["monochrome"]
    assert all(spec.colours["primary"].startswith("#") for spec in specs.values())


def test_unknown_theme_names_the_token_and_lists_the_themes():
    with pytest.raises(UserError) as error:
        config.load_theme("solarized")
    assert "'solarized'" in error.value.message and "dark, high-contrast, light, monochrome" in error.value.hint
    with pytest.raises(UserError):
        config.load_theme("../default")


def test_cli_rejects_an_unknown_theme_before_starting(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert main(["--snapshot", "/nonexistent.tar.gz", "--theme", "solarized"]) == 2
    err = capsys.readouterr().err
    assert "no theme named 'solarized'" in err and "monochrome" in err
    assert not (tmp_path / "kprobe-tui").exists()


def test_save_then_load_round_trips_and_keeps_other_settings(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    path = config.config_path()
    assert path == tmp_path / "kprobe-tui" / "config.toml"
    config.save({"theme": "light", "other": 'a "quoted" \\ value', "count": 3})
    assert config.remember("theme", "monochrome") is None
    assert config.load() == ({"theme": "monochrome", "other": 'a "quoted" \\ value', "count": 3}, None)
    assert [p.name for p in path.parent.iterdir()] == ["config.toml"]  # no temporary file left


def test_default_is_home_config_without_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert config.config_path() == tmp_path / ".config" / "kprobe-tui" / "config.toml"


def test_broken_config_is_a_warning_and_is_replaced_on_save(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text("theme = [unclosed\n")
    settings, problem = config.load(path)
    assert settings == {} and str(path) in problem
    theme, notes = config.choose_theme(None, path)
    assert theme in ("dark", "monochrome") and notes == [problem]
    config.remember("theme", "light", path)
    assert config.load(path) == ({"theme": "light"}, None)


def test_unwritable_config_is_reported_not_raised(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    problem = config.remember("theme", "light", blocker / "kprobe-tui" / "config.toml")
    assert problem and "could not remember theme" in problem


def test_choice_order_argument_then_config_then_no_color(tmp_path, monkeypatch):
    path = tmp_path / "config.toml"
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert config.choose_theme(None, path) == ("dark", [])
    monkeypatch.setenv("NO_COLOR", "1")
    assert config.choose_theme(None, path) == ("monochrome", [])
    config.save({"theme": "light"}, path)
    assert config.choose_theme(None, path) == ("light", [])  # an explicit choice overrides NO_COLOR
    assert config.choose_theme("high-contrast", path) == ("high-contrast", [])
    config.save({"theme": "gone"}, path)
    theme, notes = config.choose_theme(None, path)
    assert theme == "monochrome" and "'gone'" in notes[0]
    monkeypatch.setenv("NO_COLOR", "")  # no-color.org: only a non-empty value counts
    assert config.choose_theme(None, tmp_path / "none.toml") == ("dark", [])
