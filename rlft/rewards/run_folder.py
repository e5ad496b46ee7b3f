"""The run folder of the run whose rewards are being scored, for rewards that keep files there (the `llm_judge`
cache): the run lifecycle sets it once the folder is open and clears it when the run ends. None outside a run
(`rlft rewards try`, `rlft eval`), where such rewards keep what they would have written in memory."""

from __future__ import annotations

from pathlib import Path

_CURRENT: list[Path | None] = [None]


def set_run_folder(path: str | Path | None) -> None:
    _CURRENT[0] = None if path is None else Path(path)


def run_folder() -> Path | None:
    return _CURRENT[0]
