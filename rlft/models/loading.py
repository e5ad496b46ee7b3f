"""Model, tokenizer, LoRA and reference loading for every stage."""

from __future__ import annotations

import logging
from pathlib import Path

from rlft.config.schema import RlftConfig

log = logging.getLogger("rlft")

DTYPES = {"auto": "auto", "float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}


def resolve_model_path(cfg: RlftConfig) -> str:
    """`tiny` is rlft's built-in model, built once into the cache; anything else passes through."""
    if cfg.model.name_or_path == "tiny":
        from rlft.tiny import ensure_tiny_model

        return str(ensure_tiny_model(init_std=cfg.model.tiny_init_std))
    return cfg.model.name_or_path


def load_model_and_tokenizer(cfg: RlftConfig):
    """The policy to train and its tokenizer, from `model.name_or_path` (`tiny` built on demand), or
    from an earlier run's weights and tokenizer with `model.init_from`."""
    if cfg.model.init_from:
        from rlft.config.init_from import run_root
        from rlft.models.init_from import load_initial_policy

        return load_initial_policy(cfg), load_tokenizer(str(run_root(cfg.model.init_from) / "final"), cfg)
    path = resolve_model_path(cfg)
    return load_causal_lm(path, cfg), load_tokenizer(path, cfg)


def load_tokenizer(path: str, cfg: RlftConfig):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path, trust_remote_code=cfg.model.trust_remote_code)
    if tok.pad_token is None:  # batching needs a pad token; eos is the usual stand-in
        tok.pad_token = tok.eos_token
    return tok


def _dtype(cfg: RlftConfig):
    import torch

    name = cfg.model.torch_dtype
    if name == "auto":  # match the training precision so weights are not cast twice
        if cfg.train.bf16:
            return torch.bfloat16
        return torch.float32
    return getattr(torch, name)


def load_causal_lm(path: str, cfg: RlftConfig):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=_dtype(cfg), trust_remote_code=cfg.model.trust_remote_code)


def lora_config(cfg: RlftConfig, model=None):
    """PEFT LoraConfig from `lora.*`; target modules absent from the model are dropped with a note."""
    if not cfg.lora.enabled:
        return None
    if cfg.model.init_from:
        from rlft.models.init_from import continues_adapter

        if continues_adapter(cfg):
            return None  # the policy already carries the earlier run's adapter, trainable
    from peft import LoraConfig

    targets = list(cfg.lora.target_modules)
    if model is not None:
        present = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
        missing = [t for t in targets if t not in present]
        if missing:
            log.warning("lora.target_modules not in this model, skipped: %s", ", ".join(missing))
            targets = [t for t in targets if t in present]
        if not targets:
            raise ValueError(f"none of lora.target_modules {cfg.lora.target_modules} exist in the model")
    return LoraConfig(r=cfg.lora.r, lora_alpha=cfg.lora.lora_alpha, target_modules=targets,
                      lora_dropout=cfg.lora.lora_dropout, bias=cfg.lora.bias, task_type=cfg.lora.task_type)


def load_reference(cfg: RlftConfig):
    """An explicit reference checkpoint (full model or PEFT adapter folder), frozen; None when the policy
    with its adapter disabled is the reference (`base`, or `init` after a merged init_from)."""
    ref = cfg.model.ref
    if cfg.model.init_from and ref in ("init", "base"):
        from rlft.models.init_from import load_init_reference

        return load_init_reference(cfg)
    if ref in (None, "base", "none", ""):
        return None
    path = Path(ref)
    if (path / "adapter_config.json").is_file():
        from peft import AutoPeftModelForCausalLM

        model = AutoPeftModelForCausalLM.from_pretrained(str(path), dtype=_dtype(cfg)).merge_and_unload()
    else:
        model = load_causal_lm(str(path), cfg)
    model.eval()
    model.requires_grad_(False)
    return model
