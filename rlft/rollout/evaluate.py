"""Fresh-sample evaluation: the mean total reward of new samples on the evaluation prompts, from the
starting and from the final policy with the same seed (summary.json's `eval.start` / `eval.end`). The
evaluation rows come from `rlft.stages.common.prompt_data.prepare_prompts` (checked like the training prompts).

In a multi-process run every rank calls `evaluate` and samples its share of the prompts (rlft.rollout.split):
the numbers are the same for any number of processes."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import statistics

from rlft import progress as shown
from rlft import world
from rlft.config.eval_sampling import EVAL_SEED_OFFSET, NOT_IDENTITY, EvalSettings, eval_sampling
from rlft.rollout.eval_stats import prompt_stats
from rlft.rollout.sample import SamplingParams
from rlft.rollout.sampler import SamplerSettings, make_sampler
from rlft.rollout.score import score
from rlft.rollout.split import gather, is_sharded, process_group, rank_calls

__all__ = ["EVAL_SEED_OFFSET", "eval_calls", "evaluate", "evaluation", "sampling_params", "stage_evaluation"]


def evaluate(model, tokenizer, suite, prompts: list, columns: dict, n: int, params: SamplingParams,
             on_samples=None, *, pass_threshold: float = 1.0, extra_suite=None, sampling: dict | None = None,
             backend: SamplerSettings | None = None, label: str = "eval") -> dict:
    """{"reward_mean" (mean@n), "pass_at_k", "prompt_std", "k", "n" (scored samples), "prompts", "unscored",
    "eval_set", "per_reward" (each reward's mean), "reward_failures" (each reward's samples left without a score:
    it raised, timed out or returned no number, as training rows' rewards/<name>/errors count them), "sampling"}
    (rlft.rollout.eval_stats has the numbers' rule).
    `extra_suite` (eval.rewards) scores the same samples; its rewards join per_reward but never the total.
    `sampling` (EvalSettings.as_dict) is recorded and covered by the eval_set digest. `label` names the samples'
    progress (rlft.progress: this rank's samples drawn, shown on rank 0).
    `on_samples(samples)`, when given, gets the first completion of each prompt (prompt index, completion,
    rewards, total), on every rank: for the completions log, so one prompt's answers line up from the start
    of training to the end. Not counted toward the reward-failure
    guard, and the suite's metric window is left empty (evaluation never shows up in a training step's
    reward metrics); the training RNG is untouched when `params.seed` is set.

    The prompts are sampled `params.batch_size` completions (whole prompts) per generate call, all at once when
    it is None; the call starting at prompt i is seeded `params.seed + i`. In a multi-process run every rank must
    call this: the calls are shared out over the ranks and the scores gathered, so the numbers are the same for
    any number of processes (and equal a single process's). `backend` (sampling:) picks the engine; None = hf."""
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    if not prompts:
        raise ValueError("no prompts to sample from")
    calls = eval_calls(len(prompts), n, params)
    starts = [idx.start for idx, _ in calls]
    rank, world = process_group()
    mine: dict[int, list] = {}
    sampler = make_sampler(backend, tokenizer)
    sampler.sync(model)  # the weights evaluated reach the engine first
    waves = list(rank_calls(len(starts), rank, world, even=is_sharded(model)))
    own = sum(len(calls[k][0]) * n for k, _ in waves if k is not None)  # this rank's samples (rank 0 shows its)
    with shown.task(label, total=own, unit="samples") as bar:
        for k, keep in waves:
            if k is None:  # this rank has no chunk in the last wave
                continue
            idx, call_params = calls[k]
            rollouts = sampler.sample([prompts[i] for i in idx], call_params, n,
                                      progress=bar.callback(bar.completed))
            if keep:  # a repeated call (sharded model, fewer chunks than calls) only keeps the ranks in step
                chunk_columns = {c: [v[i] for i in idx] for c, v in columns.items()}
                scores = score(rollouts, suite, chunk_columns, count=False)
                per_reward = dict(scores.per_reward)
                if extra_suite is not None:  # eval-only rewards: reported on their own, never in the total
                    per_reward.update(score(rollouts, extra_suite, chunk_columns, count=False).per_reward)
                first = [b for b in range(len(rollouts)) if b % n == 0]  # each prompt's first sample
                mine[k] = (scores.total, per_reward,
                           [{"prompt_index": idx[rollouts.prompt_index[b]], "completion": rollouts.completions[b],
                             "rewards": {name: v[b] for name, v in per_reward.items()}, "total": scores.total[b]}
                            for b in first])
    for s in (suite, extra_suite):
        if s is not None:
            s.metrics()  # drain: these scores are not a training step's
            s.pop_logs()  # nor is what the rewards printed while scoring them (reward_logs.jsonl is per step)
    by_chunk = {k: t for part in gather(mine, world) for k, t in part.items()}
    totals = [t for k in range(len(starts)) for t in by_chunk[k][0]]
    scored = [t for t in totals if t is not None]
    names = list(suite.names) + (list(extra_suite.names) if extra_suite is not None else [])
    per_reward = {}
    for name in names:
        values = [v for k in range(len(starts)) for v in by_chunk[k][1].get(name, []) if v is not None]
        per_reward[name] = round(statistics.fmean(values), 6) if values else None
    if on_samples is not None:
        on_samples([x for k in range(len(starts)) for x in by_chunk[k][2]])
    failures = {name: sum(v is None for k in range(len(starts)) for v in by_chunk[k][1].get(name, []))
                for name in names}
    out = {**prompt_stats(totals, n, pass_threshold), "n": len(scored), "prompts": len(prompts),
           "unscored": len(totals) - len(scored), "eval_set": eval_set(prompts, names, sampling),
           "per_reward": per_reward, "reward_failures": failures}
    if sampling is not None:
        out["sampling"] = sampling
    return out


class evaluation:  # noqa: N801 - used as a function: evaluation(...)(model, step)
    """`(model, step=None) -> evaluate(...)` on these prompts; with a step, rank 0 appends each prompt's first
    sample to `self.completions` (completions.jsonl, settable once the run folder exists) as `eval-<i>` rows."""

    def __init__(self, tokenizer, suite, prompts: list, columns: dict, settings: EvalSettings, seed: int,
                 batch_size: int | None, completions=None, extra_suite=None, backend: SamplerSettings | None = None):
        per_call = settings.batch_size if settings.batch_size is not None else batch_size  # eval.batch_size first
        self.args = (tokenizer, suite, prompts, columns, settings.n, sampling_params(settings, seed, per_call))
        self.options = {"pass_threshold": settings.pass_threshold, "extra_suite": extra_suite,
                        "sampling": dataclasses.replace(settings, batch_size=per_call).as_dict(), "backend": backend}
        self.completions = completions
        self.main = world.is_main()
        self.said: set[str] = set()  # the rewards whose eval failures the console was told of

    def __call__(self, model, step: int | None = None) -> dict:
        from rlft.rollout.log import write_eval_samples

        prompts = self.args[2]
        log = None if step is None or self.completions is None or not self.main else \
            (lambda samples: write_eval_samples(self.completions, step, prompts, samples))
        label = "eval" if step is None else "eval start" if step == 0 else f"eval at step {step}"
        result = evaluate(model, *self.args, on_samples=log, label=label, **self.options)
        if self.main:
            self.say_failures(result, step)
        return result

    def say_failures(self, result: dict, step: int | None) -> None:
        """Once per reward and run, on the console: a reward gave no score to evaluation samples (each eval counts
        them in its `reward_failures`)."""
        import sys

        said = self.said
        rewards = {r.name: r for s in (self.args[1], self.options["extra_suite"]) if s is not None for r in s.rewards}
        total = result["unscored"] + result["n"]
        for name, count in (result.get("reward_failures") or {}).items():
            if not count or name in said:
                continue
            said.add(name)
            last = getattr(rewards.get(name), "last_error", None)
            print(f"rlft: WARNING evaluation{'' if step is None else f' at step {step}'}: reward {name!r} gave no "
                  f"score to {count} of {total} samples{f' (last: {last:.200})' if last else ''}; counted as "
                  f"eval reward_failures (summary.json, eval_rewards/{name}/errors in metrics.jsonl), left out of "
                  f"the eval means (said once per reward)", file=sys.stderr, flush=True)


def eval_calls(num_prompts: int, n: int, params: SamplingParams) -> list[tuple[range, SamplingParams]]:
    """An evaluation's generate calls, as (prompt indices, sampler parameters): whole prompts, `params.batch_size`
    completions per call (all at once when None), the call starting at prompt i seeded `params.seed + i`; `rlft
    eval` samples through the same calls, so its numbers are the run's own eval's for the same settings."""
    per_call = max(1, (params.batch_size or num_prompts * n) // n)  # whole prompts per generate call
    return [(range(start, min(start + per_call, num_prompts)),
             dataclasses.replace(params, batch_size=None, seed=None if params.seed is None else params.seed + start))
            for start in range(0, num_prompts, per_call)]


def sampling_params(settings: EvalSettings, seed: int, batch_size: int | None) -> SamplingParams:
    """The sampler's parameters of an evaluation: its settings, seeded `seed + settings.seed_offset`."""
    return SamplingParams(temperature=settings.temperature, top_p=settings.top_p,
                          max_new_tokens=settings.max_new_tokens, batch_size=batch_size,
                          seed=seed + settings.seed_offset, greedy=settings.greedy)


def stage_evaluation(cfg, rows: list[dict], tokenizer, suite, defaults: EvalSettings, batch_size: int | None,
                     completions=None, extra_suite=None, skip_columns=("prompt",)):
    """A stage's `evaluation` on its evaluation rows with `eval_sampling(cfg, defaults)` (the `eval:` section
    over the stage's own settings), or None when there are no rows (data.eval_prompts 0). Every single-turn
    stage builds its eval here, so with `eval:` set they all sample alike."""
    if not rows:
        return None
    prompts = [r["prompt"] for r in rows]
    columns = {k: [r.get(k) for r in rows] for k in rows[0] if k not in skip_columns}
    return evaluation(tokenizer, suite, prompts, columns, eval_sampling(cfg, defaults), cfg.train.seed, batch_size,
                      completions, extra_suite, SamplerSettings.from_config(cfg))


def eval_set(prompts: list, reward_names: list[str], sampling: dict | None = None) -> str:
    """A short digest of the prompts, the rewards and the sampling settings (EvalSettings.as_dict, less the batch
    size: NOT_IDENTITY): two stages' numbers compare only when theirs match."""
    identity = None if sampling is None else {k: v for k, v in sampling.items() if k not in NOT_IDENTITY}
    what = [prompts, list(reward_names)] + ([identity] if identity is not None else [])
    text = json.dumps(what, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]
