"""`rlft generate`: a few completions sampled from the trained policy through the rollout layer."""

from __future__ import annotations

from rlft.posttrain.policy import load_trained_policy
from rlft.posttrain.target import Target


def as_prompt(tokenizer, text: str, raw: bool = False):
    """A plain prompt as one user message when the tokenizer has a chat template (unless raw)."""
    if raw or not getattr(tokenizer, "chat_template", None):
        return text
    return [{"role": "user", "content": text}]


def generate(target: Target, prompts: list[str], n: int, max_tokens: int, temperature: float, top_p: float,
             seed: int, raw: bool = False, backend: str = "hf") -> list[dict]:
    """n completions per prompt from the target's policy, sampled by `backend` (hf or vllm, as sampling.backend)."""
    from rlft import progress
    from rlft.rollout import SamplingParams
    from rlft.rollout.sampler import SamplerSettings, sampler_for

    model, tokenizer = load_trained_policy(target)
    sampler = sampler_for(model, tokenizer, SamplerSettings(backend=backend, seed=seed))
    params = SamplingParams(temperature=temperature, top_p=top_p, max_new_tokens=max_tokens, seed=seed)
    with progress.task("generate", total=len(prompts) * n, unit="completions") as bar:
        rolls = sampler.sample([as_prompt(tokenizer, p, raw) for p in prompts], params, n, progress=bar.callback())
    return [{"prompt": prompts[rolls.prompt_index[i]], "completion": rolls.completions[i],
             "finished": rolls.finished[i] if rolls.finished else None} for i in range(len(rolls))]
