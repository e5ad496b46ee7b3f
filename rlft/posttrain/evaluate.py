"""`rlft eval`: the trained policy sampled on evaluation prompts and scored with the config's reward suite,
through the same rollout layer as training, so an eval number means what the training curve means."""

from __future__ import annotations

import statistics
from pathlib import Path

from rlft.config.schema import RlftConfig
from rlft.errors import RunError
from rlft.posttrain.policy import load_policy
from rlft.posttrain.target import Target


def sampling_section(cfg: RlftConfig):
    """The stage's sampling settings (its section's temperature/top_p/max_tokens), GRPO's otherwise."""
    from rlft.config.stages import SPECS

    section = getattr(cfg, SPECS[cfg.stage].section, None) if cfg.stage in SPECS else None
    return section if section is not None and hasattr(section, "max_tokens") else cfg.grpo


def eval_settings(cfg: RlftConfig, n: int | None = None):
    """How `rlft eval` samples: the config's `eval:` section (a run's own, when evaluating a run) over the stage's
    sampling settings (4 samples per prompt unless eval.samples_per_prompt says otherwise), as the run's own
    evaluations do; `n` (the -n flag), when given, wins."""
    import dataclasses

    from rlft.config.eval_sampling import EvalSettings, eval_sampling

    s = sampling_section(cfg)
    settings = eval_sampling(cfg, EvalSettings(n=4, max_new_tokens=s.max_tokens, temperature=s.temperature,
                                               top_p=getattr(s, "top_p", 1.0), batch_size=64))
    return settings if n is None else dataclasses.replace(settings, n=n)


def evaluate(target: Target, cfg: RlftConfig, data: str, n: int | None, out: Path, max_prompts: int | None = None,
             seed: int | None = None) -> dict:
    """Sample n completions per evaluation prompt (None: as the config's `eval:` section says, `eval_settings`),
    score them with the config's rewards, write one row per completion to `out` (completions.jsonl's format) and
    return per-reward and total means, and each reward's failures (completions it gave no score)."""
    from rlft.rewards import RewardResolveError, build_reward_suite
    from rlft.rollout import CompletionLog, SamplingParams, sample, score
    from rlft.stages.common.prompt_data import prepare_prompt_data

    try:
        suite = build_reward_suite([vars(r) for r in cfg.rewards], max_failure_fraction=1.0)
    except (RewardResolveError, ValueError) as exc:
        raise RunError(str(exc)) from None
    if not suite.rewards:
        raise RunError("the config has no rewards to score with (rewards: [...])")
    model, tokenizer = load_policy(target)
    cfg.data.eval = data
    ds = prepare_prompt_data(cfg, tokenizer, suite, "eval")  # checked and fitted like training prompts
    if max_prompts:
        ds = ds.select(range(min(max_prompts, len(ds))))
    if len(ds) == 0:
        raise RunError(f"{data}: no prompts to evaluate")
    settings = eval_settings(cfg, n)
    params = SamplingParams(temperature=settings.temperature, top_p=settings.top_p,
                            max_new_tokens=settings.max_new_tokens, batch_size=settings.batch_size,
                            seed=cfg.train.seed if seed is None else seed, greedy=settings.greedy)
    prompts = list(ds["prompt"])
    ids = list(ds["prompt_id"]) if "prompt_id" in ds.column_names else list(range(len(prompts)))
    rolls = sample(model, tokenizer, prompts, settings.n, params, prompt_ids=ids)
    columns = {c: list(ds[c]) for c in ds.column_names if c not in ("prompt", "prompt_id")}
    scores = score(rolls, suite, columns)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    CompletionLog(out, -1).write_rollouts(target.step or 0, rolls, scores)

    def mean(values):
        got = [v for v in values if v is not None]
        return statistics.fmean(got) if got else None

    return {"model": str(target.weights), "data": data, "prompts": len(prompts), "n": settings.n,
            "completions": len(rolls), "reward_mean": mean(scores.total),
            "unscored": sum(v is None for v in scores.total),
            "rewards": {name: mean(scores.per_reward[name]) for name in scores.names},
            "reward_failures": {name: sum(v is None for v in scores.per_reward[name]) for name in scores.names},
            "sampling": settings.as_dict(), "out": str(out)}
