"""Model, tokenizer, LoRA and reference loading for every stage."""

from __future__ import annotations

import logging
from pathlib import Path

from rlft.config.schema import RlftConfig
from rlft.models.weights import (DTYPES, ModelLoadError, load_adapter, load_causal_lm,  # noqa: F401 - re-exported
                                 resolve_model_path, torch_dtype)

log = logging.getLogger("rlft")


def _load_failure(name: str, exc: BaseException) -> ModelLoadError:
    import os

    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if not os.path.exists(os.path.expanduser(name)):
        offline = os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0", "false", "False")
        where = ("it is not in the local Hugging Face cache and HF_HUB_OFFLINE is set" if offline
                 else "it is not in the local Hugging Face cache and the hub could not provide it")
        return ModelLoadError(f"model.name_or_path: cannot load `{name}`: no such local folder, and as a hub id "
                              f"{where} "
                              f"({type(exc).__name__}: {text}). Check the name, download it once with network "
                              f"access, or point model.name_or_path at a local folder")
    return ModelLoadError(f"model.name_or_path: cannot load `{name}`: {type(exc).__name__}: {text}")


def load_model_and_tokenizer(cfg: RlftConfig):
    """The policy to train and its tokenizer (see `load_policy` and `load_policy_tokenizer`)."""
    return load_policy(cfg), load_policy_tokenizer(cfg)


def load_policy(cfg: RlftConfig):
    """The model this stage starts training: `model.name_or_path` (`tiny` built on demand), or with
    `model.init_from` the earlier run's weights (merged, or carrying its adapter for `continue`)."""
    if cfg.model.init_from:
        from rlft.models.init_from import load_initial_policy

        return load_initial_policy(cfg)
    try:
        return load_causal_lm(resolve_model_path(cfg), cfg)
    except (OSError, ValueError, KeyError) as exc:  # hub errors are OSError/ValueError subclasses
        raise _load_failure(cfg.model.name_or_path, exc) from None


def load_policy_tokenizer(cfg: RlftConfig):
    """The tokenizer of the policy: the base model's (`tiny` built on demand), or the one an init_from run saved with
    its model; a pad token set (eos when it has none) and data.chat_template_kwargs bound to its chat template."""
    from transformers import AutoTokenizer

    from rlft.config.init_from import init_run
    from rlft.data.chat import bind_template_kwargs

    init = init_run(cfg.model)
    try:  # the tokenizer loads first in every stage: a bad name fails here, in a second, as one line
        path = resolve_model_path(cfg) if init is None else str(init.final)
        tok = AutoTokenizer.from_pretrained(path, trust_remote_code=cfg.model.trust_remote_code)
    except (OSError, ValueError, KeyError) as exc:
        if init is not None:  # the earlier run's own tokenizer: its error as it is
            raise
        raise _load_failure(cfg.model.name_or_path, exc) from None
    if tok.pad_token is None:  # batching needs a pad token; eos is the usual stand-in
        tok.pad_token = tok.eos_token
    return bind_template_kwargs(tok, cfg.data.chat_template_kwargs)


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
        model = load_adapter_model(path, cfg).merge_and_unload()
    else:
        model = load_causal_lm(str(path), cfg)
    model.eval()
    model.requires_grad_(False)
    return model


def load_adapter_model(folder: Path, cfg: RlftConfig):
    """A PEFT adapter folder on its base model. rlft's adapters name the base as the user gave it, so
    `tiny` (rlft's built-in model, which transformers does not know) is resolved here."""
    import json

    base = json.loads((Path(folder) / "adapter_config.json").read_text()).get("base_model_name_or_path")
    if base == "tiny":
        from rlft.tiny import ensure_tiny_model

        base = str(ensure_tiny_model(init_std=cfg.model.tiny_init_std))
    return load_adapter(load_causal_lm(base, cfg), folder)
