"""Fresh-sample evaluation: the mean total reward of new samples on the evaluation prompts, from the
starting and from the final policy with the same seed (summary.json's `eval.start` / `eval.end`). The
evaluation rows come from `rlft.stages.prompt_data.eval_rows` (checked like the training prompts).

In a multi-process run every rank calls `evaluate` and samples its share of the prompts (rlft.rollout.split):
the numbers are the same for any number of processes."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import statistics

from rlft.rollout.sample import SamplingParams, sample
from rlft.rollout.score import score
from rlft.rollout.split import gather, is_sharded, process_group, rank_calls

__all__ = ["EVAL_SEED_OFFSET", "evaluate"]

EVAL_SEED_OFFSET = 7919  # evaluation draws from its own seed (train.seed + this), the same at the start and the end


def evaluate(model, tokenizer, suite, prompts: list, columns: dict, n: int, params: SamplingParams) -> dict:
    """{"reward_mean", "n" (scored samples), "prompts", "unscored", "eval_set"}. Not counted toward the reward-failure
    guard, and the suite's metric window is left empty (evaluation never shows up in a training step's
    reward metrics); the training RNG is untouched when `params.seed` is set.

    The prompts are sampled `params.batch_size` completions (whole prompts) per generate call, all at once when
    it is None; the call starting at prompt i is seeded `params.seed + i`. In a multi-process run every rank must
    call this: the calls are shared out over the ranks and the scores gathered, so the numbers are the same for
    any number of processes (and equal a single process's)."""
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    if not prompts:
        raise ValueError("no prompts to sample from")
    per_call = max(1, (params.batch_size or len(prompts) * n) // n)  # whole prompts per generate call
    starts = list(range(0, len(prompts), per_call))
    rank, world = process_group()
    mine: dict[int, list] = {}
    for k, keep in rank_calls(len(starts), rank, world, even=is_sharded(model)):
        if k is None:  # this rank has no chunk in the last wave
            continue
        idx = range(starts[k], min(starts[k] + per_call, len(prompts)))
        seed = None if params.seed is None else params.seed + starts[k]
        rollouts = sample(model, tokenizer, [prompts[i] for i in idx], n,
                          dataclasses.replace(params, batch_size=None, seed=seed))
        if keep:  # a repeated call (sharded model, fewer chunks than calls) only keeps the ranks in step
            mine[k] = score(rollouts, suite, {c: [v[i] for i in idx] for c, v in columns.items()}, count=False).total
    suite.metrics()  # drain: these scores are not a training step's
    suite.pop_logs()  # nor is what the rewards printed while scoring them (reward_logs.jsonl is per step)
    by_chunk = {k: t for part in gather(mine, world) for k, t in part.items()}
    totals = [t for k in range(len(starts)) for t in by_chunk[k]]
    scored = [t for t in totals if t is not None]
    return {"reward_mean": round(statistics.fmean(scored), 6) if scored else None, "n": len(scored),
            "prompts": len(prompts), "unscored": len(totals) - len(scored), "eval_set": eval_set(prompts, suite.names)}


def eval_set(prompts: list, reward_names: list[str]) -> str:
    """A short digest of the prompts and the rewards: two stages' numbers compare only when theirs match."""
    text = json.dumps([prompts, list(reward_names)], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]
