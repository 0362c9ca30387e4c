"""The config file and the theme files: remembered, validated, never a crash."""

from __future__ import annotations

import os

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


@pytest.mark.parametrize("text, problem", [
    pytest.param("when = 1979-05-27\n", "'when' is not a setting", id="date"),  # save could not write it back
    pytest.param("x = " + "9" * 5000 + "\n", "Exceeds the limit (4300 digits)", id="5000-digit-integer"),
    pytest.param("[colours]\nfg = 1\n", "'colours' is not a setting", id="table"),  # saved back as JSON: not TOML
    pytest.param("x = nan\n", "'x' is not a setting", id="nan"),
    pytest.param('"a b" = 1\n', "'a b' is not a setting", id="quoted-key"),
    pytest.param("theme = [1, 2]\n", "'theme' is not a setting", id="array"),
    pytest.param("\xff\xfe\x00garbage", "it is corrupt", id="binary"),
])
def test_a_corrupt_config_is_a_warning_and_remembering_replaces_it(tmp_path, text, problem):
    """Every one of these was an exception out of load or remember (the TUI did not start), or was saved
    back as a file the next start could not read."""
    path = tmp_path / "config.toml"
    path.write_bytes(text.encode("latin-1"))
    settings, warning = config.load(path)
    assert settings == {} and f"config file {path}: it is corrupt" in warning and problem in warning
    assert "fix or delete it" in warning
    assert config.choose_theme(None, path)[1] == [warning]
    assert config.remember("theme", "light", path) is None
    assert config.load(path) == ({"theme": "light"}, None)


def test_a_directory_or_fifo_at_the_config_path_is_a_warning_not_a_hang(tmp_path):
    os.mkdir(tmp_path / "dir.toml")
    os.mkfifo(tmp_path / "fifo.toml")
    for name, kind in (("dir.toml", "a directory"), ("fifo.toml", "a FIFO")):
        settings, warning = config.load(tmp_path / name)
        assert settings == {} and f"{tmp_path / name}: is {kind}" in warning


def test_any_string_is_saved_as_toml_that_reads_back(tmp_path):
    """JSON's escapes are TOML's but for DEL (TOML wants it escaped) and astral characters (ensure_ascii
    writes them as surrogate pairs, which TOML refuses): both made the next start ignore the file."""
    path = tmp_path / "config.toml"
    text = "".join(chr(code) for code in range(0x2000)) + "\U0001f600 \U0010ffff"
    config.save({"note": text, "n": -3, "ratio": 1.5, "on": True}, path)
    assert config.load(path) == ({"note": text, "n": -3, "ratio": 1.5, "on": True}, None)
