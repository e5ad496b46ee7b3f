"""What a stage loads, read from its config once and torch-free: the policy's weights (the base model, `tiny` built on
demand, or an init_from run's), their dtype, the reference, the tokenizer's settings and the fresh LoRA adapter.
rlft.models.loading loads from it, so the config's sections are read here and nowhere below."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rlft.config.init_from import InitRun, init_run

if TYPE_CHECKING:
    from rlft.config.schema import RlftConfig


@dataclass(frozen=True)
class LoraSettings:
    """`lora.*` as PEFT's LoraConfig takes them (target modules absent from the model are dropped when it is made)."""

    r: int
    lora_alpha: int | None
    target_modules: list[str]
    lora_dropout: float
    bias: str
    task_type: str


@dataclass(frozen=True)
class LoadPlan:
    """A stage's models as its config describes them. `dtype` is a torch dtype's name (`auto` already resolved to the
    training precision); `init` is the init_from run (None without one); `lora` the fresh adapter to add (None with
    lora.enabled off, or when the policy carries an earlier run's adapter, trainable)."""

    name: str
    tiny_init_std: float
    dtype: str
    trust_remote_code: bool
    ref: str | None
    init: InitRun | None
    lora_enabled: bool
    lora: LoraSettings | None
    chat_template_kwargs: dict | None = None


def weights_dtype(cfg: RlftConfig) -> str:
    """model.torch_dtype; `auto` matches the training precision, so weights are not cast twice."""
    name = cfg.model.torch_dtype
    if name == "auto":
        return "bfloat16" if cfg.train.bf16 else "float32"
    return name


def load_plan(cfg: RlftConfig) -> LoadPlan:
    """The plan of `cfg`'s models (the init_from run's folder is looked at, nothing is loaded)."""
    m, lo = cfg.model, cfg.lora
    init = init_run(m)
    lora = None
    if lo.enabled and not (init is not None and init.continues):
        lora = LoraSettings(lo.r, lo.lora_alpha, list(lo.target_modules), lo.lora_dropout, lo.bias, lo.task_type)
    return LoadPlan(name=m.name_or_path, tiny_init_std=m.tiny_init_std, dtype=weights_dtype(cfg),
                    trust_remote_code=m.trust_remote_code, ref=m.ref, init=init, lora_enabled=lo.enabled, lora=lora,
                    chat_template_kwargs=cfg.data.chat_template_kwargs)
