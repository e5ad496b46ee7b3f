"""Config problems are collected, never raised one at a time: a user sees every mistake at once."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Problem:
    """One error or warning about a config key, naming the layer that set it."""
    key: str      # dotted key path, or a pseudo-key such as "(yaml)" or "--stage"
    layer: str    # the file (with line) or "command line" that set it
    message: str  # what is wrong and what is allowed
    level: str = "error"  # "error" or "warning"
    stage: str | None = None  # in a pipeline: which stage ("stage 2 (rs_sft)")

    def __str__(self) -> str:
        where = f"{self.stage}: " if self.stage else ""
        return f"{where}{self.level}: {self.key} ({self.layer}): {self.message}"

    def for_stage(self, label: str) -> "Problem":
        return replace(self, stage=label)


class ConfigError(Exception):
    """One or more config problems; str() lists them one per line."""

    def __init__(self, problems: list[Problem]):
        self.problems = list(problems)
        super().__init__("\n".join(map(str, self.problems)))
