"""The command palette (ctrl+p) offers every action: the bound actions of the screen it was opened
on (its widgets' too) and of the app, each with its key, and every theme.

Read from the live bindings, like the help screen: an action bound anywhere is in the palette.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider

from kprobe_tui.tui.screens.help import own_bindings


class ActionsProvider(Provider):
    """One command per action (``name``, ``help`` shows the key); themes as ``Theme: NAME``."""

    def _commands(self) -> list[tuple[str, str, Callable[[], object]]]:
        app, screen = self.app, self.screen
        commands: list[tuple[str, str, Callable[[], object]]] = []
        seen: set[tuple[int, str]] = set()
        nodes = [screen, *screen.query("*"), app]
        for node in nodes:
            for binding in own_bindings(node):
                if (id(node), binding.action) in seen:
                    continue
                seen.add((id(node), binding.action))
                keys = ", ".join(app.get_key_display(binding.with_key(key)) for key in binding.key.split(","))
                name = binding.description or binding.action.replace("_", " ")
                commands.append((name, f"key: {keys}", partial(app.run_action, binding.action, node)))
        for theme in sorted(getattr(app, "theme_names", ())):
            commands.append((f"Theme: {theme}", "switch the colours (remembered)", partial(setattr, app, "theme", theme)))
        return commands

    async def discover(self) -> Hits:
        for name, help_text, command in self._commands():
            yield DiscoveryHit(name, command, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, help_text, command in self._commands():
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), command, text=name, help=help_text)
