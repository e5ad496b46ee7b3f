"""The trained policy loaded as `rlft eval`, `generate` and `export --merge` use it: the adapter on its base
(rebuilt through the run's init_from chain when it has one) or the full model, and its tokenizer."""

from __future__ import annotations

from pathlib import Path

from rlft.config.schema import RlftConfig
from rlft.errors import RunError
from rlft.posttrain.target import Target, adapter_config, run_config, run_model_name


def base_model_path(target: Target) -> str:
    """Where the adapter's base model is on this machine: the adapter's recorded base if it exists
    here, else the run's `model.name_or_path` (`tiny` built on demand, as in training)."""
    from rlft.tiny import ensure_tiny_model

    recorded = adapter_config(target.weights).get("base_model_name_or_path")
    for name in (recorded, run_model_name(target.run_root)):
        if not name or not isinstance(name, str):
            continue
        if name == "tiny":
            std = (run_config(target.run_root).get("model") or {}).get("tiny_init_std")
            return str(ensure_tiny_model(**({"init_std": std} if std is not None else {})))
        if Path(name).exists() or not name.startswith(("/", ".")):
            return name
    raise RunError(f"{target.weights}: its base model {recorded!r} is not on this machine and no run config names "
                   f"another; pass the run folder instead")


def chain_start(target: Target, dtype: str):
    """The weights the target's adapter was trained on when its run started from an earlier run (`model.init_from`,
    a pipeline's later stage): that chain rebuilt as training rebuilt it. None for a run that started from its base
    (the adapter's recorded base is then right)."""
    settings = run_config(target.run_root)
    model_section = settings.get("model") if isinstance(settings.get("model"), dict) else {}
    if not model_section.get("init_from"):
        return None
    from rlft.config.schema import from_dict
    from rlft.models.init_from import start_model
    from rlft.models.weights import ModelLoadError

    cfg = from_dict(RlftConfig, {k: settings[k] for k in ("model", "train") if isinstance(settings.get(k), dict)})
    cfg.model.torch_dtype = dtype
    try:
        return start_model(target.run_root, cfg)
    except ModelLoadError as exc:
        raise RunError(f"{target.run_root}: {exc}") from None


def load_trained_policy(target: Target, dtype: str = "float32"):
    """The trained policy (adapter on its base, or the full model) and its tokenizer, in eval mode."""
    import torch
    from transformers import AutoTokenizer

    from rlft.data.chat import bind_template_kwargs
    from rlft.models.weights import load_adapter, pretrained_causal_lm

    from rlft import progress

    dt = getattr(torch, dtype)
    with progress.task(f"loading {target.weights}"):  # a spinner (plain: a line every period) while weights load
        if target.is_adapter:
            base_path = base_model_path(target)
            start = chain_start(target, dtype)
            model = load_adapter(start if start is not None else pretrained_causal_lm(base_path, dt), target.weights)
            tok_path = target.weights if (target.weights / "tokenizer_config.json").is_file() else base_path
        else:
            model = pretrained_causal_lm(str(target.weights), dt)
            tok_path = target.weights
    tokenizer = AutoTokenizer.from_pretrained(str(tok_path))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    # the run's chat-template variables: the trained policy is sampled on prompts rendered as in training
    template_kwargs = (run_config(target.run_root).get("data") or {}).get("chat_template_kwargs")
    bind_template_kwargs(tokenizer, template_kwargs if isinstance(template_kwargs, dict) else None)
    model.eval()
    return model, tokenizer
