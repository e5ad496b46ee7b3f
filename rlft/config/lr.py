"""`train.learning_rate: auto` and `train.lr_batch_reference`, resolved without loading the model.

`auto` is tinker-cookbook's `get_lr`: lr = 5e-5 x (10 with LoRA) x (2000 / hidden_size) ** e, with e
calibrated per model family (Llama 0.781, Qwen 0.0775; other families are not calibrated, so rlft
asks for a number there), times `train.rl_lr_factor` (the RL guides suggest 0.5-1.0 of the SFT rate).
`lr_batch_reference: N` then scales whatever rate results by sqrt(effective batch / N): the guides'
LR ∝ √batch rule, with the rate taken as tuned for a batch of N.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from rlft.config.compose import Composed, Layer
from rlft.config.errors import Problem

LR_EXPONENTS = {"llama": 0.781, "qwen": 0.0775}
BASE_LR = 5e-5
LORA_FACTOR = 10.0  # LoRA's rate over full fine-tuning's ("LoRA Without Regret")


def _get(data: dict, path: str) -> Any:
    node: Any = data
    for part in path.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def _hub_config(repo_id: str) -> Path | None:
    """config.json of a hub model already in the local cache (no network)."""
    roots = [os.environ.get("HF_HUB_CACHE"), os.environ.get("HF_HOME") and str(Path(os.environ["HF_HOME"]) / "hub"),
             str(Path.home() / ".cache" / "huggingface" / "hub")]
    for root in filter(None, roots):
        snapshots = Path(root) / f"models--{repo_id.replace('/', '--')}" / "snapshots"
        found = sorted(snapshots.glob("*/config.json")) if snapshots.is_dir() else []
        if found:
            return found[-1]
    return None


def model_shape(name: str) -> tuple[int, str]:
    """(hidden_size, model_type) from the model's config.json, without loading weights; ValueError says why not."""
    if name == "tiny":
        import inspect

        from rlft.tiny import tiny_model_name

        defaults = {k: p.default for k, p in inspect.signature(tiny_model_name).parameters.items()}
        return int(defaults["hidden_size"]), str(defaults["arch"])
    local = Path(name).expanduser() / "config.json"
    path = local if local.is_file() else _hub_config(name)
    if path is None:
        raise ValueError(f"no config.json for `{name}` here (not a local folder, not in the hub cache)")
    import json  # a model's own config.json: not for the default `tiny`

    config = json.loads(path.read_text())
    hidden = config.get("hidden_size") or (config.get("text_config") or {}).get("hidden_size")
    if not isinstance(hidden, int):
        raise ValueError(f"{path} has no hidden_size")
    return hidden, str(config.get("model_type", ""))


def family(name: str, model_type: str) -> str | None:
    for text in (name.lower(), model_type.lower()):
        for fam in LR_EXPONENTS:
            if fam in text:
                return fam
    return None


def auto_learning_rate(hidden_size: int, fam: str, lora: bool, rl_factor: float = 1.0) -> float:
    return BASE_LR * (LORA_FACTOR if lora else 1.0) * (2000 / hidden_size) ** LR_EXPONENTS[fam] * rl_factor


def resolve_learning_rate(c: Composed, problems: list[Problem]) -> None:
    """Replace `auto` by the number, apply lr_batch_reference, and record how (a layer `--explain` shows)."""
    data = c.data
    lr = _get(data, "train.learning_rate")
    ref = _get(data, "train.lr_batch_reference")
    if lr != "auto" and ref is None:
        return
    train = data.setdefault("train", {})
    how: list[str] = []
    if lr == "auto":
        name = _get(data, "model.name_or_path") or "tiny"
        factor = _get(data, "train.rl_lr_factor")
        factor = factor if isinstance(factor, (int, float)) and not isinstance(factor, bool) and factor > 0 else 1.0
        lora = _get(data, "lora.enabled") is not False
        try:
            hidden, model_type = model_shape(str(name))
        except (ValueError, OSError) as exc:  # json.JSONDecodeError is a ValueError
            problems.append(Problem("train.learning_rate", c.layer_of("train.learning_rate"),
                                    f"`auto` needs the model's hidden size: {exc}; set a number instead"))
            train.pop("learning_rate", None)  # reported here; not again as a wrong type
            return
        fam = family(str(name), model_type)
        if fam is None:
            problems.append(Problem("train.learning_rate", c.layer_of("train.learning_rate"),
                                    f"`auto` is calibrated for Llama and Qwen models only (`{name}` is "
                                    f"`{model_type or 'unknown'}`); set a number instead"))
            train.pop("learning_rate", None)
            return
        lr = auto_learning_rate(hidden, fam, lora, factor)
        how.append(f"auto = 5e-5 x {'10 (LoRA)' if lora else '1 (full)'} x (2000/{hidden})^{LR_EXPONENTS[fam]} ({fam}) "
                   f"x {factor:g} (rl_lr_factor) = {lr:.3g}")
    if ref is not None and isinstance(ref, int) and ref > 0 and isinstance(lr, (int, float)) \
            and not isinstance(lr, bool):
        ints = [_get(data, k) for k in ("train.per_device_train_batch_size", "train.gradient_accumulation_steps",
                                        "hw.num_processes")]
        ints = [1 if v is None else v for v in ints]  # unset: the schema default, 1 for each
        if all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in ints):
            effective = math.prod(ints)
            scaled = lr * math.sqrt(effective / ref)
            how.append(f"x sqrt({effective} effective batch / {ref} lr_batch_reference) = {scaled:.3g}")
            lr = scaled
    if not how:
        return
    train["learning_rate"] = float(lr)
    c.layers.append(Layer("; ".join(how), {"train": {"learning_rate": float(lr)}}))
