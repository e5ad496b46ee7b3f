"""Loading a causal LM's weights from a folder or hub id, in the run's dtype, and a checkpoint's weights into a
model that is already built (the lowest model layer: the policy, reference, init_from, resume and rollback
loaders build on it)."""

from __future__ import annotations

from pathlib import Path

from rlft.config.schema import RlftConfig

DTYPES = {"auto": "auto", "float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}


class ModelLoadError(Exception):
    """The model or tokenizer cannot be loaded; the message is one line naming it and the fix."""


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


def pretrained_causal_lm(path: str, dtype, trust_remote_code: bool = False):
    """The causal LM saved in a folder (or a hub id), in `dtype` (a torch dtype)."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=dtype, trust_remote_code=trust_remote_code)


def load_causal_lm(path: str, cfg: RlftConfig):
    return pretrained_causal_lm(path, torch_dtype(cfg), cfg.model.trust_remote_code)


def load_adapter(model, folder: str | Path, *, trainable: bool = False):
    """A PEFT adapter folder on `model` (a new PeftModel; `trainable` to train it further)."""
    from peft import PeftModel

    return PeftModel.from_pretrained(model, str(folder), is_trainable=trainable)


def load_weights_into(model, folder: str | Path) -> None:
    """A checkpoint's trained weights into `model` as it stands (resume, rollback, the next round): its LoRA
    adapter (adapter_model.safetensors) into a PEFT model, else its full weights (model.safetensors; a key the
    file lacks keeps its value)."""
    from safetensors.torch import load_file

    adapter = Path(folder) / "adapter_model.safetensors"
    if adapter.is_file():
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(model, load_file(str(adapter)))
    else:
        model.load_state_dict(load_file(str(Path(folder) / "model.safetensors")), strict=False)
