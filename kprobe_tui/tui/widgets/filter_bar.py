"""``/`` and a filter box: the one filter bar of the function list, the events screen and the probes panel.

A prompt, the box (``#filter``) and, when the screen has something to say beside it, a note (a
count, where the filter runs). ``focus_now`` moves the focus at once rather than on the next turn
of the event loop (``Widget.focus``), so a key typed right after ``/`` finds the box focused.
The look is in themes/default.tcss.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.suggester import Suggester
from textual.widgets import Input, Static


class FilterBar(Horizontal):
    def __init__(self, placeholder: str, note: str | None = None, *, note_id: str = "filter-note",
                 fixed_note: bool = False, suggester: Suggester | None = None, id: str = "filter-bar") -> None:
        """``fixed_note``: the note's width is fixed in the CSS, so a new note needs no new layout (the
        function list's count changes on every keystroke)."""
        super().__init__(id=id)
        self._placeholder = placeholder
        self._note = note
        self._note_id = note_id
        self._fixed_note = fixed_note
        self._suggester = suggester

    def compose(self) -> ComposeResult:
        yield Static("/", classes="filter-prompt")
        yield Input(placeholder=self._placeholder, suggester=self._suggester, id="filter")
        if self._note is not None:
            yield Static(self._note, id=self._note_id, classes="filter-note")

    @property
    def input(self) -> Input:
        return self.query_one(Input)

    @property
    def value(self) -> str:
        return self.input.value

    def focus_now(self) -> None:
        self.screen.set_focus(self.input)

    def note(self, text: str | Text) -> None:
        """What to say beside the box."""
        self.query_one(f"#{self._note_id}", Static).update(text, layout=not self._fixed_note)
