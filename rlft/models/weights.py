"""Loading a causal LM's weights from a folder or hub id, in the run's dtype (the lowest model layer:
the policy, reference and init_from loaders build on it)."""

from __future__ import annotations

from rlft.config.schema import RlftConfig

DTYPES = {"auto": "auto", "float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}


def resolve_model_path(cfg: RlftConfig) -> str:
    """`tiny` is rlft's built-in model, built once into the cache; anything else passes through."""
    if cfg.model.name_or_path == "tiny":
        from rlft.tiny import ensure_tiny_model

        return str(ensure_tiny_model(init_std=cfg.model.tiny_init_std))
    return cfg.model.name_or_path


def torch_dtype(cfg: RlftConfig):
    import torch

    name = cfg.model.torch_dtype
    if name == "auto":  # match the training precision so weights are not cast twice
        if cfg.train.bf16:
            return torch.bfloat16
        return torch.float32
    return getattr(torch, name)


def load_causal_lm(path: str, cfg: RlftConfig):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype(cfg), trust_remote_code=cfg.model.trust_remote_code)
