"""The numbers of one evaluation from its scores: mean@n, pass@n and the spread over prompts. Pure and torch-free,
so the report and the tests read them without a model."""

from __future__ import annotations

import statistics


def prompt_stats(totals: list, n: int, pass_threshold: float) -> dict:
    """From prompt-major totals (n per prompt; None = no score):
    - `reward_mean`: mean@n, the mean of every scored sample;
    - `pass_at_k`: the share of prompts with at least one sample whose total reaches `pass_threshold`
      (a prompt with no scored sample fails);
    - `prompt_std`: the population std over prompts of each prompt's mean (prompts with no scored sample left out),
      how unevenly the policy does across prompts;
    - `k`: n, the samples each prompt had.
    With n = 1 pass@1 is the share of samples that pass."""
    if n < 1 or len(totals) % n:
        raise ValueError(f"{len(totals)} totals are not whole groups of n={n}")
    groups = [totals[i:i + n] for i in range(0, len(totals), n)]
    scored = [t for t in totals if t is not None]
    means = [statistics.fmean(s) for s in ([t for t in g if t is not None] for g in groups) if s]
    passed = sum(1 for g in groups if any(t is not None and t >= pass_threshold for t in g))
    return {"reward_mean": round(statistics.fmean(scored), 6) if scored else None,
            "pass_at_k": round(passed / len(groups), 6) if groups else None,
            "prompt_std": round(statistics.pstdev(means), 6) if means else None,
            "k": n}
