"""The sampler: one interface over the engines that draw completions for rlft's own sampling paths.

    sampler = make_sampler(SamplerSettings.from_config(cfg), tokenizer)
    sampler.sync(policy)                                   # the weights to sample (pushed only when they changed)
    rollouts = sampler.sample(prompts, params, n, progress=None, prompt_ids=None)   # -> Rollouts

Backends (`sampling.backend`): `hf` (transformers `generate` on the policy itself, rlft.rollout.sample) and `vllm`
(an in-process vLLM engine, rlft.rollout.vllm_sampler, created once per process and updated in place). Both
return the same `Rollouts`: token ids, masks, texts, finished flags and the sampler's per-token log-probs at the
sampling temperature, which the learner reads as the behaviour policy's. A sampler holds no trainer state: it is
given the model to sample (sync) and plain data (prompts, SamplingParams).
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence

from rlft.rollout.sample import Rollouts, SamplingParams, sample
from rlft.rollout.sampling_settings import Progress, SamplerSettings

__all__ = ["HFSampler", "Progress", "Sampler", "SamplerSettings", "make_sampler", "sampler_for"]

class Sampler(Protocol):
    """What every backend does."""

    def sync(self, model) -> None:
        """Sample `model` as it is now from the next `sample` on (a no-op when its weights have not changed)."""

    def sample(self, prompts: Sequence[Any], params: SamplingParams, n: int, progress: Progress | None = None,
               prompt_ids: Sequence[Any] | None = None) -> Rollouts:
        """n completions per prompt (rows prompt-major), as rlft.rollout.sample documents."""


class HFSampler:
    """transformers `generate` on the synced model itself: nothing to push, the model is the sampler."""

    backend = "hf"

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.model = None

    def sync(self, model) -> None:
        self.model = model

    def sample(self, prompts: Sequence[Any], params: SamplingParams, n: int, progress: Progress | None = None,
               prompt_ids: Sequence[Any] | None = None) -> Rollouts:
        if self.model is None:
            raise RuntimeError("HFSampler.sample before sync(model)")
        return sample(self.model, self.tokenizer, prompts, n, params, prompt_ids=prompt_ids, progress=progress)


def make_sampler(settings: SamplerSettings | None, tokenizer) -> Sampler:
    """The backend `settings.backend` names (hf when None). A vLLM sampler shares the process's one engine."""
    if settings is None or settings.backend == "hf":
        return HFSampler(tokenizer)
    if settings.backend == "vllm":
        from rlft.rollout.vllm_sampler import VLLMSampler

        return VLLMSampler(settings, tokenizer)
    raise ValueError(f"unknown sampling backend {settings.backend!r}; expected hf or vllm")


def sampler_for(model, tokenizer, settings: SamplerSettings | None = None) -> Sampler:
    """A sampler of `settings`' backend, synced to `model`."""
    s = make_sampler(settings, tokenizer)
    s.sync(model)
    return s
