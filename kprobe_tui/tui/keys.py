"""Keys go where the user meant them, however fast they come: one key at a time.

Textual routes a key to the focused widget the moment the app reads it, but a key's binding runs
later, once the key has come back up to the app unhandled, and the focus change it makes
(``Widget.focus``) later still. A burst (a fast typist; an SSH connection delivering ``/tcp_v4``
in one packet) is therefore routed as a whole to the widget focused before the burst: after ``/``
the letters went to the function list, where ``p`` opened the builder on the wrong function and
``e`` the events screen; after ``p`` and ``escape`` they were lost or typed into a closing screen.

``KeyRouter`` routes the next key only once the previous one has been handled: the app holds the
keys behind it, and trails a callback behind the key through the queues it travels (the focused
widget's, each ancestor's up to the screen's, the app's), then once more through the app's and
the current screen's (the focus change and the new screen a binding asked for land there first).
When it arrives, the next key is routed, to wherever the focus is now. A key alone (none held) is
routed at once, as Textual does; keys wait only behind one still in flight, by a few passes of
the event loop. ``DEADLINE`` bounds the wait should a callback be lost with a closing screen.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable

from textual import events
from textual.app import App
from textual.dom import DOMNode
from textual.timer import Timer

DEADLINE = 0.25  # seconds: a key still in flight by then no longer holds the ones behind it


class KeyRouter:
    """Used by the app's ``on_event``: ``take(key)`` says whether the key waits for an earlier one."""

    def __init__(self, app: App, route: Callable[[events.Key], Awaitable[None]]) -> None:
        """``route``: what the app does with a key (Textual's own routing)."""
        self.app = app
        self._route = route
        self._held: deque[events.Key] = deque()
        self._in_flight = False
        self._deadline: Timer | None = None
        self._trip = 0  # which key's trail is the current one: a late trail of an earlier key is ignored

    def take(self, key: events.Key) -> bool:
        """True when ``key`` is held behind one in flight (it is routed in its turn)."""
        if self._in_flight:
            self._held.append(key)
            return True
        return False

    async def route(self, key: events.Key) -> None:
        """Route ``key`` now, and hold the next ones until it has been handled."""
        self._in_flight = True
        self._trip += 1
        target = self.app.focused or self.app.screen  # where Textual sends it (unless a priority binding takes it)
        await self._route(key)
        self._trail(target.ancestors_with_self, self._trip)
        self._deadline = self.app.set_timer(DEADLINE, lambda trip=self._trip: self._landed(trip))

    def _trail(self, path: list[DOMNode], trip: int) -> None:
        """A callback that runs in each queue of ``path`` in turn, after what the key put there."""
        for index, node in enumerate(path):
            if node is self.app:
                break
            if node.call_later(self._trail, path[index + 1:], trip):
                return
        # at the app: after the key's binding; then after the focus change and the screen push it queued
        self.app.call_later(self._through_screen, trip)

    def _through_screen(self, trip: int) -> None:
        if not self.app.screen.call_later(self.app.call_later, self._landed, trip):
            self.app.call_later(self._landed, trip)

    async def _landed(self, trip: int) -> None:
        if trip != self._trip or not self._in_flight:
            return
        if self._deadline is not None:
            self._deadline.stop()
            self._deadline = None
        self._in_flight = False
        if self._held:
            await self.route(self._held.popleft())
