"""Stage runners, by name. Each entry is an import path so the CLI loads only the stage it runs."""

from __future__ import annotations

import importlib

RUNNERS: dict[str, str] = {
    "grpo": "rlft.stages.grpo:run",
    "dpo": "rlft.stages.dpo:run",
    "orpo": "rlft.stages.orpo:run",
    "ppo": "rlft.stages.ppo:run",
}
EXPERIMENTAL = {"orpo"}  # wraps trl.experimental


class StageNotBuilt(Exception):
    pass


def get_runner(stage: str):
    """The `run(cfg, run_ctx)` function of a stage, or StageNotBuilt with a clear message."""
    target = RUNNERS.get(stage)
    if target is None:
        built = ", ".join(sorted(RUNNERS))
        raise StageNotBuilt(f"stage `{stage}` is not built yet in this version of rlft (stages that train: {built}). "
                            f"`rlft validate-config --stage {stage}` already checks its config.")
    module, _, fn = target.partition(":")
    return getattr(importlib.import_module(module), fn)
