"""Errors a user can act on.

Every failure that reaches the user is a ``UserError``: it names what was wrong and what to
do about it. The CLI prints it without a traceback; the TUI shows it in a notification.
"""


class UserError(Exception):
    """Something the user (or their machine) must change; ``hint`` says what."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message}\n  hint: {self.hint}" if self.hint else self.message
