"""The options a command passes to a run: resume or overwrite its folder, what to print, the resume command."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RunOptions:
    resume: bool = False
    overwrite: bool = False
    verbose: bool = False
    allow_config_change: bool = False
    argv: list = field(default_factory=list)  # the command's arguments, for the printed resume command
    resume_hint: str | None = None  # the resume command when the run is part of something larger (a pipeline)
