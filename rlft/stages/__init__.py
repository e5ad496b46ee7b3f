"""The stages, one folder each: `rlft/stages/<name>/spec.py` (what the stage is: its section, checks and
metrics; no torch) and `runner.py` (its recipe). Recipe parts two stages share sit in common/ (RS-SFT and AWR's
rounds in sampled_sft.py, the preference stages' eval in preference_eval.py among them).

This package imports nothing at load: `rlft.config.stages` imports each folder's spec by name, and a
runner is imported only when its stage runs."""

from __future__ import annotations

import importlib


def get_runner(stage: str):
    """The `run(cfg, composed, opts)` function of a stage (its spec's `runner`, imported now)."""
    from rlft.config.stages import get_spec

    module, _, fn = get_spec(stage).runner.partition(":")
    return getattr(importlib.import_module(module), fn)
