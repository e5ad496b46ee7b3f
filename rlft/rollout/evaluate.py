"""Fresh-sample evaluation: the mean total reward of new samples on the evaluation prompts, from the
starting and from the final policy with the same seed (summary.json's `eval.start` / `eval.end`). The
evaluation rows come from `rlft.stages.prompt_data.eval_rows` (checked like the training prompts)."""

from __future__ import annotations

import hashlib
import json
import statistics

from rlft.rollout.sample import SamplingParams, sample
from rlft.rollout.score import score

__all__ = ["EVAL_SEED_OFFSET", "evaluate"]

EVAL_SEED_OFFSET = 7919  # evaluation draws from its own seed (train.seed + this), the same at the start and the end


def evaluate(model, tokenizer, suite, prompts: list, columns: dict, n: int, params: SamplingParams) -> dict:
    """{"reward_mean", "n" (scored samples), "prompts", "unscored", "eval_set"}. Not counted toward the reward-failure
    guard, and the suite's metric window is left empty (evaluation never shows up in a training step's
    reward metrics); the training RNG is untouched when `params.seed` is set."""
    rollouts = sample(model, tokenizer, prompts, n, params)
    totals = score(rollouts, suite, columns, count=False).total
    suite.metrics()  # drain: these scores are not a training step's
    suite.pop_logs()  # nor is what the rewards printed while scoring them (reward_logs.jsonl is per step)
    scored = [t for t in totals if t is not None]
    return {"reward_mean": round(statistics.fmean(scored), 6) if scored else None, "n": len(scored),
            "prompts": len(prompts), "unscored": len(totals) - len(scored), "eval_set": eval_set(prompts, suite.names)}


def eval_set(prompts: list, reward_names: list[str]) -> str:
    """A short digest of the prompts and the rewards: two stages' numbers compare only when theirs match."""
    text = json.dumps([prompts, list(reward_names)], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]
