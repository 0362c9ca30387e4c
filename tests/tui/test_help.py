"""``?`` opens help for the screen underneath; ctrl+p offers every bound action and the themes."""

from __future__ import annotations

import importlib
import inspect
import io
import pkgutil

from rich.console import Console
from textual.command import CommandList
from textual.screen import Screen
from textual.widgets import Footer, Input, Static

from kprobe_tui.tui import screens
from kprobe_tui.tui.screens.help import (
    GOLDEN_RULE,
    HELP,
    HelpScreen,
    help_for,
    own_bindings,
)
from kprobe_tui.tui.widgets.function_list import FunctionList
from tests.tui.states import catalog_loaded, kernel_app, to_events, until


def screen_classes() -> set[type[Screen]]:
    found = set()
    for module in pkgutil.iter_modules(screens.__path__):
        loaded = importlib.import_module(f"{screens.__name__}.{module.name}")
        found |= {cls for _, cls in inspect.getmembers(loaded, inspect.isclass)
                  if issubclass(cls, Screen) and cls.__module__ == loaded.__name__}
    return found - {HelpScreen}


def test_every_screen_has_a_help_text():
    names = {cls.__name__ for cls in screen_classes()}
    assert {"FunctionsScreen", "SourceScreen", "ProbeBuilderScreen", "EventsScreen"} <= names
    missing = {cls.__name__ for cls in screen_classes() if help_for(cls)[1] == ""}
    assert not missing, f"add these to kprobe_tui/tui/screens/help.py HELP: {sorted(missing)}"
    assert set(HELP) <= names, "HELP names a screen that no longer exists"


def help_text(app) -> str:
    """Everything the help screen says, scrolled out of view or not (its key tables are Rich tables)."""
    console = Console(width=200, record=True, file=io.StringIO())
    for static in app.screen.query(Static):
        console.print(static.content)
    return console.export_text()


async def test_question_mark_explains_the_current_screen_its_keys_and_the_golden_rule():
    app = kernel_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await catalog_loaded(pilot)
        browser = app.screen
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen) and app.screen.about is browser
        text = help_text(app)
        assert HELP["FunctionsScreen"][1].split(".")[0] in text
        for binding in own_bindings(browser) + own_bindings(browser.query_one(FunctionList)) + own_bindings(app):
            assert binding.description in text, binding  # every key the screen, its list and the app bind
        assert GOLDEN_RULE.splitlines()[0] in text and "tcp_sendmsg" in text  # the SSH example
        assert app.screen.query(Footer) and browser.query(Footer)
        await pilot.press("escape")
        assert app.screen is browser

        await to_events(pilot)  # help follows the screen it is opened on
        await pilot.press("question_mark")
        text = help_text(app)
        assert "Help: Events" in text and "Abs/rel time" in text  # the event table's own key
        await pilot.press("question_mark")
        assert app.screen.__class__.__name__ == "EventsScreen"


async def test_f1_opens_help_while_typing_in_the_filter():
    app = kernel_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await catalog_loaded(pilot)
        await pilot.press("slash", *"tcp?", "f1")  # ? is a glob character in the box
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert app.screen.query_one("#filter").value == "tcp?"


async def test_palette_lists_and_runs_the_screens_actions(tmp_path):
    app = kernel_app()
    async with app.run_test(size=(100, 30)) as pilot:
        functions = await catalog_loaded(pilot)
        await pilot.press("slash", *"tcp_v4_", "escape")
        await pilot.press("ctrl+p")
        await pilot.press(*"Match mode")
        found = app.screen.query_one(CommandList)
        # the palette searches its providers in a worker and shows the hits in batches
        await until(pilot, lambda: found.option_count == 1, "the palette found Match mode")
        assert [str(found.get_option_at_index(i).prompt) for i in range(found.option_count)] == ["Match mode\nkey: ^t"]
        await pilot.press("enter")
        await pilot.pause()
        assert app.screen.mode == "glob"  # the screen's ctrl+t ran from the palette
        assert str(app.screen.query_one("#filter-info").render()).startswith("glob")
        assert functions.has_focus  # back on the screen it was opened from


async def test_palette_switches_theme_and_remembers_it(tmp_path):
    from kprobe_tui import config

    path = tmp_path / "kprobe-tui" / "config.toml"
    app = kernel_app()
    app.remember_in = path
    async with app.run_test(size=(100, 30)) as pilot:
        await catalog_loaded(pilot)
        await pilot.press("ctrl+p", *"Theme: high")
        commands = app.screen.query_one(CommandList)
        await until(pilot, lambda: any("high-contrast" in str(commands.get_option_at_index(i).prompt)
                                       for i in range(commands.option_count)), "the palette found the theme")
        await pilot.press("enter")
        await pilot.pause()
        assert app.theme == "high-contrast"
    assert config.load(path) == ({"theme": "high-contrast"}, None)
    assert config.choose_theme(None, path) == ("high-contrast", [])


async def test_the_help_key_is_on_screen_at_80x24_and_a_click_opens_help_even_from_a_field():
    """At 80 columns the footer cuts the app's keys: the help key is docked, visible on every main screen,
    and a click on it opens help even while the filter has the focus (it presses F1, not a letter)."""
    from textual.widgets._footer import FooterKey

    from kprobe_tui.tui.widgets.key_footer import KeyFooter

    app = kernel_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await catalog_loaded(pilot)
        for reach in (None, to_events):
            if reach is not None:
                await reach(pilot)
            screen = app.screen
            [key] = [key for key in screen.query_one(KeyFooter).query(FooterKey) if key.has_class("-help")]
            region = key.region
            assert region.width and region.right <= 80 and region.y == 23, region
            assert "? Help" in str(key.render())
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, type(screen)), "back from the events")
        browser = app.screen
        await pilot.press("slash", *"tcp")
        [key] = [key for key in browser.query_one(KeyFooter).query(FooterKey) if key.has_class("-help")]
        await pilot.click(key)
        await until(pilot, lambda: isinstance(app.screen, HelpScreen), "the click opens help")
        assert browser.query_one("#filter", Input).value == "tcp"  # nothing typed into the filter
