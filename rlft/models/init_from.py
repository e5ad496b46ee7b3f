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

from rlft.config.init_from import ChainError, Weights, init_run, start_weights, weights_after
from rlft.config.init_from import starts_from_base as _starts_from_base
from rlft.config.schema import RlftConfig
from rlft.models.weights import ModelLoadError, load_adapter, load_causal_lm

log = logging.getLogger("rlft")


def _read(read, *args):
    """What `read` (a reader of rlft.config.init_from) reads of the chain; a ModelLoadError naming the damaged or
    missing run (an earlier run of the chain is read here for the first time, after validation)."""
    try:
        return read(*args)
    except ChainError as exc:
        raise ModelLoadError(f"model.init_from: {exc}") from None


def build(weights: Weights, cfg: RlftConfig):
    """The model `weights` describes: its base (`tiny` built on demand) or saved full model, its adapters merged."""
    if weights.full is not None:
        model = load_causal_lm(str(weights.full), cfg)
    else:
        name = weights.name
        if name == "tiny":
            from rlft.tiny import ensure_tiny_model

            name = str(ensure_tiny_model(init_std=weights.tiny_init_std))
        model = load_causal_lm(name, cfg)
    for folder in weights.adapters:
        model = load_adapter(model, folder).merge_and_unload()
    return model


def start_model(root: Path, cfg: RlftConfig):
    """The model run `root` started from (before its own adapter)."""
    return build(_read(start_weights, root, cfg.model.name_or_path, cfg.model.tiny_init_std), cfg)


def merged_model(root: Path, cfg: RlftConfig):
    """The weights after run `root`: its start with its final adapter merged in."""
    return build(_read(weights_after, root, cfg.model.name_or_path, cfg.model.tiny_init_std), cfg)


def starts_from_base(root: Path) -> bool:
    """Whether run `root` started from the plain base model (so disabling its adapter gives the base)."""
    return _read(_starts_from_base, root)


def load_initial_policy(cfg: RlftConfig):
    """The policy this stage starts training from: merged weights + a fresh LoRA later (`merge`), or the
    earlier adapter itself, trainable (`continue`)."""
    init = init_run(cfg.model)
    if init.continues:
        start = build(_read(init.start), cfg)
        return load_adapter(start, init.final, trainable=True)
    return build(_read(init.after), cfg)


def continues_adapter(cfg: RlftConfig) -> bool:
    """True when the policy already carries its (earlier) adapter, so no new LoRA is added."""
    init = init_run(cfg.model)
    return init is not None and init.continues


def load_init_reference(cfg: RlftConfig):
    """The frozen reference for a stage with init_from, or None when the adapter-disabled policy is it."""
    init = init_run(cfg.model)
    ref = cfg.model.ref
    if ref == "init":
        if not init.continues and cfg.lora.enabled:
            return None  # the merged start model with this stage's fresh LoRA disabled
        model = build(_read(init.after), cfg)
    elif ref == "base":
        if init.continues and _read(init.starts_from_base):
            return None  # the earlier adapter disabled leaves the base
        base = Weights(name=cfg.model.name_or_path, tiny_init_std=cfg.model.tiny_init_std)
        model = build(base, cfg)  # model.name_or_path is the chain's original base
    else:
        return None
    model.eval()
    model.requires_grad_(False)
    return model
