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

__all__ = ["EVAL_SEED_OFFSET", "evaluate", "evaluation"]

EVAL_SEED_OFFSET = 7919  # evaluation draws from its own seed (train.seed + this), the same at the start and the end


def evaluate(model, tokenizer, suite, prompts: list, columns: dict, n: int, params: SamplingParams,
             on_samples=None) -> dict:
    """{"reward_mean", "n" (scored samples), "prompts", "unscored", "eval_set", "per_reward" (each reward's mean)}.
    `on_samples(samples)`, when given, gets the first completion of each prompt (prompt index, completion,
    rewards, total), on every rank: for the completions log, so one prompt's answers line up from the start
    of training to the end. Not counted toward the reward-failure
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
            scores = score(rollouts, suite, {c: [v[i] for i in idx] for c, v in columns.items()}, count=False)
            first = [b for b in range(len(rollouts)) if b % n == 0]  # each prompt's first sample
            mine[k] = (scores.total, scores.per_reward,
                       [{"prompt_index": idx[rollouts.prompt_index[b]], "completion": rollouts.completions[b],
                         "rewards": {name: v[b] for name, v in scores.per_reward.items()}, "total": scores.total[b]}
                        for b in first])
    suite.metrics()  # drain: these scores are not a training step's
    suite.pop_logs()  # nor is what the rewards printed while scoring them (reward_logs.jsonl is per step)
    by_chunk = {k: t for part in gather(mine, world) for k, t in part.items()}
    totals = [t for k in range(len(starts)) for t in by_chunk[k][0]]
    scored = [t for t in totals if t is not None]
    per_reward = {}
    for name in suite.names:
        values = [v for k in range(len(starts)) for v in by_chunk[k][1].get(name, []) if v is not None]
        per_reward[name] = round(statistics.fmean(values), 6) if values else None
    if on_samples is not None:
        on_samples([x for k in range(len(starts)) for x in by_chunk[k][2]])
    return {"reward_mean": round(statistics.fmean(scored), 6) if scored else None, "n": len(scored),
            "prompts": len(prompts), "unscored": len(totals) - len(scored), "eval_set": eval_set(prompts, suite.names),
            "per_reward": per_reward}


class evaluation:  # noqa: N801 - used as a function: evaluation(...)(model, step)
    """`(model, step=None) -> evaluate(...)` on these prompts; with a step, rank 0 appends each prompt's first
    sample to `self.completions` (completions.jsonl, settable once the run folder exists) as `eval-<i>` rows."""

    def __init__(self, tokenizer, suite, prompts: list, columns: dict, n: int, params: SamplingParams,
                 completions=None):
        import os

        self.args = (tokenizer, suite, prompts, columns, n, params)
        self.completions = completions
        self.main = os.environ.get("RANK", "0") == "0"

    def __call__(self, model, step: int | None = None) -> dict:
        from rlft.rollout.log import write_eval_samples

        prompts = self.args[2]
        log = None if step is None or self.completions is None or not self.main else \
            (lambda samples: write_eval_samples(self.completions, step, prompts, samples))
        return evaluate(model, *self.args, on_samples=log)


def eval_set(prompts: list, reward_names: list[str]) -> str:
    """A short digest of the prompts and the rewards: two stages' numbers compare only when theirs match."""
    text = json.dumps([prompts, list(reward_names)], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]
