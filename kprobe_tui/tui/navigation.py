"""Where a screen asks to go: one message per request, handled by the app, the only one that pushes
and pops screens (messages go up, method calls go down). A screen never walks the screen stack nor
calls into another screen, so each one runs on its own under any Textual app (as the tests host them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.message import Message

from kprobe_tui.kernel.events import DynamicEvent

if TYPE_CHECKING:  # an annotation only: the builder's form (and its compiler) is not loaded with the app
    from kprobe_tui.probes.form import BuilderKind


class OpenSource(Message):
    """The source view of a function (``function`` as the list names it: a clone shows its origin's source)."""

    def __init__(self, function: str) -> None:
        super().__init__()
        self.function = function


class OpenBuilder(Message):
    """The probe builder on ``function``: a line probe when ``line`` is given (relative, as perf -L
    numbers it), else ``kind`` (entry or return); ``variable``: arguments to prefill."""

    def __init__(self, function: str, *, line: int | None = None, kind: BuilderKind = "entry",
                 variable: str | None = None) -> None:
        super().__init__()
        self.function = function
        self.line = line
        self.kind = kind
        self.variable = variable


class EditProbe(Message):
    """The builder prefilled from ``event``'s definition (what it can carry over is ``target``); Create replaces it."""

    def __init__(self, event: DynamicEvent, target) -> None:
        super().__init__()
        self.event = event
        self.target = target


class ShowEvents(Message):
    """This run's events, recording ``patterns`` too (``group/event`` globs; [] = every probe event,
    when nothing records yet): the events screen already open, or a new one."""

    def __init__(self, patterns: list[str]) -> None:
        super().__init__()
        self.patterns = patterns


class OpenStats(Message):
    """The statistics view of ``request`` (a ``screens.stats.StatsRequest``); in lab mode, its hand-off."""

    def __init__(self, request) -> None:
        super().__init__()
        self.request = request


class OpenGraph(Message):
    """What a kernel function calls (the call tree); in lab mode, the command an administrator runs."""

    def __init__(self, function: str) -> None:
        super().__init__()
        self.function = function


class Back(Message):
    """Close this screen (unless it is the first)."""
