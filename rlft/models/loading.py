"""Model, tokenizer, LoRA and reference loading for every stage, from the torch-free plan of rlft.config.load_plan
(`policy`, `tokenizer`, `reference`, `peft_config`); the `load_*(cfg)` forms make the plan first."""

from __future__ import annotations

import logging
from pathlib import Path

from rlft import progress as shown
from rlft.config.load_plan import LoadPlan, load_plan
from rlft.config.schema import RlftConfig
from rlft.models.weights import (DTYPES, ModelLoadError, load_adapter, load_causal_lm,  # noqa: F401 - re-exported
                                 model_path, planned_causal_lm, resolve_model_path, torch_dtype)

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
    """The policy to train and its tokenizer (see `policy` and `tokenizer`)."""
    plan = load_plan(cfg)
    return policy(plan), tokenizer(plan)


def load_policy(cfg: RlftConfig):
    """`policy` of the config's plan."""
    return policy(load_plan(cfg))


def load_policy_tokenizer(cfg: RlftConfig):
    """`tokenizer` of the config's plan."""
    return tokenizer(load_plan(cfg))


def lora_config(cfg: RlftConfig, model=None):
    """`peft_config` of the config's plan."""
    return peft_config(load_plan(cfg), model)


def load_reference(cfg: RlftConfig):
    """`reference` of the config's plan."""
    return reference(load_plan(cfg))


def load_adapter_model(folder: Path, cfg: RlftConfig):
    """`adapter_model` in the config's plan's dtype."""
    return adapter_model(folder, load_plan(cfg))


def policy(plan: LoadPlan):
    """The model this stage starts training: `model.name_or_path` (`tiny` built on demand), or with
    `model.init_from` the earlier run's weights (merged, or carrying its adapter for `continue`)."""
    with shown.task(f"loading {plan.name}"):  # a spinner (plain: a line every period) while the weights load
        if plan.init is not None:
            from rlft.models.init_from import initial_policy

            return initial_policy(plan)
        try:
            return planned_causal_lm(model_path(plan.name, plan.tiny_init_std), plan)
        except (OSError, ValueError, KeyError) as exc:  # hub errors are OSError/ValueError subclasses
            raise _load_failure(plan.name, exc) from None


def tokenizer(plan: LoadPlan):
    """The tokenizer of the policy: the base model's (`tiny` built on demand), or the one an init_from run saved with
    its model; a pad token set (eos when it has none) and data.chat_template_kwargs bound to its chat template."""
    from transformers import AutoTokenizer

    from rlft.data.chat import bind_template_kwargs

    init = plan.init
    try:  # the tokenizer loads first in every stage: a bad name fails here, in a second, as one line
        path = model_path(plan.name, plan.tiny_init_std) if init is None else str(init.final)
        tok = AutoTokenizer.from_pretrained(path, trust_remote_code=plan.trust_remote_code)
    except (OSError, ValueError, KeyError) as exc:
        if init is not None:  # the earlier run's own tokenizer: its error as it is
            raise
        raise _load_failure(plan.name, exc) from None
    if tok.pad_token is None:  # batching needs a pad token; eos is the usual stand-in
        tok.pad_token = tok.eos_token
    return bind_template_kwargs(tok, plan.chat_template_kwargs)


def peft_config(plan: LoadPlan, model=None):
    """PEFT LoraConfig from `lora.*` (None without a fresh adapter); target modules absent from the model are dropped
    with a note."""
    lo = plan.lora
    if lo is None:  # lora.enabled off, or the policy already carries the earlier run's adapter, trainable
        return None
    from peft import LoraConfig

    targets = list(lo.target_modules)
    if model is not None:
        present = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
        missing = [t for t in targets if t not in present]
        if missing:
            log.warning("lora.target_modules not in this model, skipped: %s", ", ".join(missing))
            targets = [t for t in targets if t in present]
        if not targets:
            raise ValueError(f"none of lora.target_modules {lo.target_modules} exist in the model")
    return LoraConfig(r=lo.r, lora_alpha=lo.lora_alpha, target_modules=targets,
                      lora_dropout=lo.lora_dropout, bias=lo.bias, task_type=lo.task_type)


def reference(plan: LoadPlan):
    """An explicit reference checkpoint (full model or PEFT adapter folder), frozen; None when the policy
    with its adapter disabled is the reference (`base`, or `init` after a merged init_from)."""
    ref = plan.ref
    if plan.init is not None and ref in ("init", "base"):
        from rlft.models.init_from import init_reference

        return init_reference(plan)
    if ref in (None, "base", "none", ""):
        return None
    path = Path(ref)
    if not (path / "adapter_config.json").is_file():
        model = planned_causal_lm(str(path), plan)
    else:
        model = adapter_model(path, plan).merge_and_unload()
    model.eval()
    model.requires_grad_(False)
    return model


def adapter_model(folder: Path, plan: LoadPlan):
    """A PEFT adapter folder on its base model. rlft's adapters name the base as the user gave it, so
    `tiny` (rlft's built-in model, which transformers does not know) is resolved here."""
    import json

    base = json.loads((Path(folder) / "adapter_config.json").read_text()).get("base_model_name_or_path")
    return load_adapter(planned_causal_lm(model_path(base, plan.tiny_init_std), plan), folder)
