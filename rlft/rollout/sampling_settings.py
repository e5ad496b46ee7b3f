"""What a sampler is told: the `sampling:` section as plain data, and the progress callback's shape. Below both
backends (rlft.rollout.sampler, rlft.rollout.vllm_sampler), which import it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

__all__ = ["Progress", "SamplerSettings"]

Progress = Callable[[int, int], None]  # (completions done, total), called after each chunk


@dataclass(frozen=True)
class SamplerSettings:
    """The `sampling:` section as plain data (what a sampler needs, nothing of the run)."""
    backend: str = "hf"
    vllm_dtype: str = "auto"              # auto = the policy's dtype
    enforce_eager: bool = True
    max_model_len: int | None = None      # None: the model's max_position_embeddings
    kv_cache_gib: int = 1
    gpu_memory_utilization: float = 0.3
    seed: int = 0                         # the engine's own seed (each seeded request carries its own)
    lora_sync: str = "auto"               # merged | adapter | auto (adapter on CUDA, merged on CPU)
    lora_rank: int | None = None          # the adapter the run trains (lora.r), when vLLM's LoRA can serve it

    @classmethod
    def from_config(cls, cfg: Any) -> SamplerSettings:
        s = getattr(cfg, "sampling", None)
        if s is None:  # a config from before the section existed
            return cls()
        return cls(backend=s.backend, vllm_dtype=s.vllm_dtype, enforce_eager=s.enforce_eager,
                   max_model_len=s.max_model_len or cfg.train.max_seq_length, kv_cache_gib=s.kv_cache_gib,
                   gpu_memory_utilization=s.gpu_memory_utilization, seed=cfg.train.seed, lora_sync=s.lora_sync,
                   lora_rank=_servable_rank(cfg))


def _servable_rank(cfg: Any) -> int | None:
    """lora.r when the run trains a LoRA adapter that vLLM's LoRA serves (rlft configures no DoRA; no bias)."""
    lora = getattr(cfg, "lora", None)
    if lora is None or not lora.enabled or getattr(lora, "bias", "none") != "none":
        return None
    return lora.r
