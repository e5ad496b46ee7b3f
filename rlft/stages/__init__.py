"""The stages, one folder each: `rlft/stages/<name>/spec.py` (what the stage is: its section, checks and
metrics; no torch) and `runner.py` (its recipe). Recipe parts two stages share sit in common/ (RS-SFT and AWR's
rounds in sampled_sft.py, the preference stages' eval in preference_eval.py among them).

This package imports nothing at load: `rlft.config.stages` imports each folder's spec by name, and a
runner is imported only when its stage runs."""

from __future__ import annotations

import importlib


class StageNotBuilt(Exception):
    pass


def get_runner(stage: str):
    """The `run(cfg, composed, opts)` function of a stage, or StageNotBuilt with a clear message."""
    from rlft.config.stages import SPECS, STAGES, get_spec

    target = get_spec(stage).runner
    if target is None:
        built = ", ".join(s for s in STAGES if SPECS[s].runner)
        raise StageNotBuilt(f"stage `{stage}` is not built yet in this version of rlft (stages that train: {built}). "
                            f"`rlft validate-config --stage {stage}` already checks its config.")
    module, _, fn = target.partition(":")
    return getattr(importlib.import_module(module), fn)
