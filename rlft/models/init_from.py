"""Rebuild the weights of an earlier rlft run, for a stage that starts from it (`model.init_from`).

A run's final adapter was trained on top of the model that run *started* from, so a chain is rebuilt
from its root: start(R) is the base model when R had no init_from, the merged weights of R's own
init_from run when R merged it (`init_mode: merge`), or that run's start when R continued its adapter.
The weights after R are start(R) with R's final adapter merged in (or R's full model when it trained
without LoRA). rlft.config.init_from reads the chain from the runs' folders once (`InitRun`, `Weights`);
this module loads what it describes.
"""

from __future__ import annotations

import logging
from pathlib import Path

from rlft.config.init_from import ChainError, Weights, start_weights, weights_after
from rlft.config.load_plan import LoadPlan, load_plan
from rlft.config.schema import RlftConfig
from rlft.models.weights import ModelLoadError, load_adapter, model_path, planned_causal_lm

log = logging.getLogger("rlft")


def _read(read, *args):
    """What `read` (a reader of rlft.config.init_from) reads of the chain; a ModelLoadError naming the damaged or
    missing run (an earlier run of the chain is read here for the first time, after validation)."""
    try:
        return read(*args)
    except ChainError as exc:
        raise ModelLoadError(f"model.init_from: {exc}") from None


def build(weights: Weights, plan: LoadPlan):
    """The model `weights` describes: its base (`tiny` built on demand) or saved full model, its adapters merged, in
    the plan's dtype."""
    path = str(weights.full) if weights.full is not None else model_path(weights.name, weights.tiny_init_std)
    model = planned_causal_lm(path, plan)
    for folder in weights.adapters:
        model = load_adapter(model, folder).merge_and_unload()
    return model


def start_model(root: Path, cfg: RlftConfig):
    """The model run `root` started from (before its own adapter)."""
    return build(_read(start_weights, root, cfg.model.name_or_path, cfg.model.tiny_init_std), load_plan(cfg))


def merged_model(root: Path, cfg: RlftConfig):
    """The weights after run `root`: its start with its final adapter merged in."""
    return build(_read(weights_after, root, cfg.model.name_or_path, cfg.model.tiny_init_std), load_plan(cfg))


def initial_policy(plan: LoadPlan):
    """The policy this stage starts training from: merged weights + a fresh LoRA later (`merge`), or the
    earlier adapter itself, trainable (`continue`)."""
    init = plan.init
    if init.continues:
        start = build(_read(init.start), plan)
        return load_adapter(start, init.final, trainable=True)
    return build(_read(init.after), plan)


def init_reference(plan: LoadPlan):
    """The frozen reference for a stage with init_from, or None when the adapter-disabled policy is it."""
    init, ref = plan.init, plan.ref
    if ref == "init":
        if not init.continues and plan.lora_enabled:
            return None  # the merged start model with this stage's fresh LoRA disabled
        model = build(_read(init.after), plan)
    elif ref == "base":
        if init.continues and _read(init.starts_from_base):
            return None  # the earlier adapter disabled leaves the base
        base = Weights(name=plan.name, tiny_init_std=plan.tiny_init_std)
        model = build(base, plan)  # model.name_or_path is the chain's original base
    else:
        return None
    model.eval()
    model.requires_grad_(False)
    return model
