"""The error a run raises when it cannot start or continue: the CLI prints its message and exits with its code.

At the bottom of the layers (it imports nothing of rlft's), so every module that refuses a run can raise it."""

from __future__ import annotations


class RunError(Exception):
    """A run cannot start or continue; the message says why and what to do."""

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code
