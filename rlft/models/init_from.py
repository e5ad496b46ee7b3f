"""Rebuild the weights of an earlier rlft run, for a stage that starts from it (`model.init_from`).

A run's final adapter was trained on top of the model that run *started* from, so a chain is rebuilt
from its root: start(R) is the base model when R had no init_from, the merged weights of R's own
init_from run when R merged it (`init_mode: merge`), or that run's start when R continued its adapter.
The weights after R are start(R) with R's final adapter merged in (or R's full model when it trained
without LoRA).
"""

from __future__ import annotations

import logging
from pathlib import Path

from rlft.config.init_from import read_chain_run, run_root
from rlft.config.run_config import RunConfigError
from rlft.config.schema import RlftConfig
from rlft.models.weights import ModelLoadError, load_adapter, load_causal_lm

log = logging.getLogger("rlft")


def _has_adapter(root: Path) -> bool:
    return (root / "final" / "adapter_config.json").is_file()


def _load_base(model_cfg: dict, cfg: RlftConfig):
    name = model_cfg.get("name_or_path") or cfg.model.name_or_path
    if name == "tiny":
        from rlft.tiny import ensure_tiny_model

        name = str(ensure_tiny_model(init_std=model_cfg.get("tiny_init_std", cfg.model.tiny_init_std)))
    return load_causal_lm(name, cfg)


def _model_section(root: Path) -> dict:
    """The `model` section of run `root`'s config.yaml; a ModelLoadError naming the file when it is damaged
    (an earlier run of the chain is read here for the first time, after validation)."""
    try:
        model_cfg = read_chain_run(root).get("model") or {}
    except RunConfigError as exc:
        raise ModelLoadError(f"model.init_from: {exc}") from None
    parent = model_cfg.get("init_from")
    if parent is not None and not isinstance(parent, str):
        raise ModelLoadError(f"model.init_from: {root / 'config.yaml'} is damaged: its model.init_from is not a path")
    if parent and not run_root(parent).is_dir():
        raise ModelLoadError(f"model.init_from: run {root} started from {parent}, which is gone; the chain's weights "
                             f"cannot be rebuilt without it")
    return model_cfg


def start_model(root: Path, cfg: RlftConfig):
    """The model run `root` started from (before its own adapter)."""
    model_cfg = _model_section(root)
    parent = model_cfg.get("init_from")
    if not parent:
        return _load_base(model_cfg, cfg)
    parent_root = run_root(parent)
    if model_cfg.get("init_mode", "merge") == "continue" and _has_adapter(parent_root):
        return start_model(parent_root, cfg)
    return merged_model(parent_root, cfg)


def merged_model(root: Path, cfg: RlftConfig):
    """The weights after run `root`: its start with its final adapter merged in."""
    if not _has_adapter(root):
        return load_causal_lm(str(root / "final"), cfg)
    return load_adapter(start_model(root, cfg), root / "final").merge_and_unload()


def starts_from_base(root: Path) -> bool:
    """Whether run `root` started from the plain base model (so disabling its adapter gives the base)."""
    return not _model_section(root).get("init_from")


def load_initial_policy(cfg: RlftConfig):
    """The policy this stage starts training from: merged weights + a fresh LoRA later (`merge`), or the
    earlier adapter itself, trainable (`continue`)."""
    root = run_root(cfg.model.init_from)
    if cfg.model.init_mode == "continue" and _has_adapter(root):
        return load_adapter(start_model(root, cfg), root / "final", trainable=True)
    return merged_model(root, cfg)


def continues_adapter(cfg: RlftConfig) -> bool:
    """True when the policy already carries its (earlier) adapter, so no new LoRA is added."""
    return bool(cfg.model.init_from) and cfg.model.init_mode == "continue" \
            and _has_adapter(run_root(cfg.model.init_from))


def load_init_reference(cfg: RlftConfig):
    """The frozen reference for a stage with init_from, or None when the adapter-disabled policy is it."""
    root = run_root(cfg.model.init_from)
    ref = cfg.model.ref
    carries_adapter = continues_adapter(cfg)
    if ref == "init":
        if not carries_adapter and cfg.lora.enabled:
            return None  # the merged start model with this stage's fresh LoRA disabled
        model = merged_model(root, cfg)
    elif ref == "base":
        if carries_adapter and starts_from_base(root):
            return None  # the earlier adapter disabled leaves the base
        model = _load_base({}, cfg)  # model.name_or_path is the chain's original base
    else:
        return None
    model.eval()
    model.requires_grad_(False)
    return model
