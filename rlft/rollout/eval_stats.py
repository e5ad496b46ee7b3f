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


def _kind(value) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", float: "a number", int: "a number",
            type(None): "null"}.get(type(value), type(value).__name__)


def eval_result_problem(result) -> str | None:
    """What makes a stored evaluation result (an eval start kept in a checkpoint for a resume) other than what
    `evaluate` returns: a part that is not an object, a mean that is not a number, a count that is not one; None
    when it reads as one. Said after the file's name by the caller."""
    if not isinstance(result, dict):
        return f"is {_kind(result)}, not an object"
    for key in ("reward_mean", "pass_at_k", "prompt_std", "success_rate", "episode_length", "preference_accuracy"):
        value = result.get(key)
        if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool)):
            return f"{key} is {_kind(value)}, not a number"
    for key in ("n", "k", "prompts", "unscored"):
        value = result.get(key)
        if value is not None and (type(value) is not int or value < 0):
            return f"{key} is {_kind(value)} {value!r:.20}, not a count"
    for key in ("per_reward", "reward_failures", "sampling"):
        if key in result and not isinstance(result[key], dict):
            return f"{key} is {_kind(result[key])}, not an object"
    return None
