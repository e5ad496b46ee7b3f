"""Config problems are collected, never raised one at a time: a user sees every mistake at once."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    key: str      # dotted key path, or a pseudo-key such as "(yaml)" or "--stage"
    layer: str    # the file (with line) or "command line" that set it
    message: str  # what is wrong and what is allowed
    level: str = "error"  # "error" or "warning"

    def __str__(self) -> str:
        return f"{self.level}: {self.key} ({self.layer}): {self.message}"


class ConfigError(Exception):
    """One or more config problems; str() lists them one per line."""

    def __init__(self, problems: list[Problem]):
        self.problems = list(problems)
        super().__init__("\n".join(map(str, self.problems)))
