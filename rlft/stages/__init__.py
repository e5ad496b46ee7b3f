"""Stage runners, looked up through each stage's StageSpec (rlft.config.stages): the runner is an
import path, so the CLI loads only the stage it runs."""

from __future__ import annotations

import importlib

from rlft.config.stages import SPECS, STAGES, StageSpec, get_spec

RUNNERS: dict[str, str] = {name: spec.runner for name, spec in SPECS.items() if spec.runner}
EXPERIMENTAL = {name for name, spec in SPECS.items() if spec.experimental}

__all__ = ["EXPERIMENTAL", "RUNNERS", "SPECS", "STAGES", "StageNotBuilt", "StageSpec", "get_runner", "get_spec"]


class StageNotBuilt(Exception):
    pass


def get_runner(stage: str):
    """The `run(cfg, composed, opts)` function of a stage, or StageNotBuilt with a clear message."""
    target = get_spec(stage).runner
    if target is None:
        built = ", ".join(s for s in STAGES if s in RUNNERS)
        raise StageNotBuilt(f"stage `{stage}` is not built yet in this version of rlft (stages that train: {built}). "
                            f"`rlft validate-config --stage {stage}` already checks its config.")
    module, _, fn = target.partition(":")
    return getattr(importlib.import_module(module), fn)
