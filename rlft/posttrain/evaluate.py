"""`rlft eval`: the trained policy sampled on evaluation prompts and scored with the config's reward suite,
through the same rollout layer as training, so an eval number means what the training curve means."""

from __future__ import annotations

import statistics
from pathlib import Path

from rlft.config.schema import RlftConfig
from rlft.errors import RunError
from rlft.posttrain.policy import load_trained_policy
from rlft.posttrain.target import Target
from rlft import run_files


def sampling_section(cfg: RlftConfig):
    """The stage's sampling settings (its section's temperature/top_p/max_tokens), GRPO's otherwise."""
    from rlft.config.stages import SPECS

    section = getattr(cfg, SPECS[cfg.stage].section, None) if cfg.stage in SPECS else None
    return section if section is not None and hasattr(section, "max_tokens") else cfg.grpo


def eval_settings(cfg: RlftConfig, n: int | None = None, run_root: Path | None = None):
    """How `rlft eval` samples: the config's `eval:` section (a run's own, when evaluating a run) over the stage's
    sampling settings (4 samples per prompt unless eval.samples_per_prompt says otherwise), as the run's own
    evaluations do; `n` (the -n flag), when given, wins. Without eval.batch_size, a run's own eval batch size
    (summary.json), else 64: it only decides which draws a prompt gets, and the run's gives the run's numbers."""
    import dataclasses

    from rlft.config.eval_sampling import EvalSettings, eval_sampling

    s, batch = sampling_section(cfg), run_eval_batch_size(run_root)
    settings = eval_sampling(cfg, EvalSettings(n=4, max_new_tokens=s.max_tokens, temperature=s.temperature,
                                               top_p=getattr(s, "top_p", 1.0), batch_size=batch))
    return settings if n is None else dataclasses.replace(settings, n=n)


def run_eval_batch_size(run_root: Path | None, default: int = 64) -> int:
    """The completions per generate call of the run's own last evaluation (summary.json's eval.end, else
    eval.start), else `default`."""
    from rlft.monitor.summary import read_summary

    ev = ((read_summary(run_root / run_files.SUMMARY) or {}) if run_root is not None else {}).get("eval")
    for part in ("end", "start"):
        got = ev.get(part) if isinstance(ev, dict) else None
        size = (got.get("sampling") or {}).get("batch_size") if isinstance(got, dict) and \
            isinstance(got.get("sampling"), dict) else None
        if type(size) is int and size > 0:
            return size
    return default


def policy_for(target: Target, cfg: RlftConfig):
    """The policy and its tokenizer, rendering with the config's data.chat_template_kwargs when it sets them (a
    `-c` file or an override; load_trained_policy binds the run's own otherwise), as training rendered its prompts."""
    from rlft.data.chat import bind_template_kwargs

    model, tokenizer = load_trained_policy(target)
    kwargs = cfg.data.chat_template_kwargs
    return model, bind_template_kwargs(tokenizer, kwargs if isinstance(kwargs, dict) else None)


def evaluate(target: Target, cfg: RlftConfig, data: str, n: int | None, out: Path, max_prompts: int | None = None,
             seed: int | None = None, composed=None) -> dict:
    """Sample n completions per evaluation prompt (None: as the config's `eval:` section says, `eval_settings`),
    score them with the config's rewards and its eval-only `eval.rewards` (never in the total), write one row per
    completion to `out` (completions.jsonl's format) and return the numbers under the names summary.json's eval
    parts use (reward_mean, pass_at_k, prompt_std, k, per_reward, reward_failures, eval_set, sampling), plus
    `rewards` (the training rewards' means) and `eval_rewards` (the eval-only ones'). Seeded and split into generate
    calls as the run's own evaluation (rlft.rollout.evaluate.eval_calls, train.seed + eval's seed offset), so the
    same policy, prompts and settings give the run's numbers."""
    from rlft import progress
    from rlft.rewards import RewardResolveError, build_reward_suite
    from rlft.rollout import CompletionLog, Scores, score
    from rlft.rollout.sampler import SamplerSettings, sampler_for
    from rlft.rollout.eval_stats import prompt_stats
    from rlft.rollout.evaluate import eval_calls, eval_set, sampling_params
    from rlft.stages.common.prompt_data import prepare_prompt_data

    def suite_of(key: str, specs):
        try:
            where = composed.dir_of(key) if composed is not None else None
            return build_reward_suite([vars(r) for r in specs], config_dir=where, max_failure_fraction=1.0)
        except (RewardResolveError, ValueError) as exc:
            raise RunError(str(exc) if key == "rewards" else f"{key}: {exc}") from None

    suite = suite_of("rewards", cfg.rewards)
    if not suite.rewards:
        raise RunError("the config has no rewards to score with (rewards: [...])")
    extra = suite_of("eval.rewards", cfg.eval.rewards) if cfg.eval.rewards else None
    model, tokenizer = policy_for(target, cfg)
    cfg.data.eval = data
    ds = prepare_prompt_data(cfg, tokenizer, suite, "eval")  # checked and fitted like training prompts
    if max_prompts:
        ds = ds.select(range(min(max_prompts, len(ds))))
    if len(ds) == 0:
        raise RunError(f"{data}: no prompts to evaluate")
    settings = eval_settings(cfg, n, target.run_root)
    params = sampling_params(settings, cfg.train.seed if seed is None else seed, settings.batch_size)
    prompts = list(ds["prompt"])
    ids = list(ds["prompt_id"]) if "prompt_id" in ds.column_names else list(range(len(prompts)))
    columns = {c: list(ds[c]) for c in ds.column_names if c not in ("prompt", "prompt_id")}
    names = list(suite.names) + (list(extra.names) if extra is not None else [])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    log = CompletionLog(out, -1)
    totals: list = []
    per_reward: dict[str, list] = {name: [] for name in names}
    sampler = sampler_for(model, tokenizer, SamplerSettings.from_config(cfg))  # sampling.backend
    with progress.task("eval", total=len(prompts) * settings.n, unit="samples") as bar:
        for idx, call in eval_calls(len(prompts), settings.n, params):
            rolls = sampler.sample([prompts[i] for i in idx], call, settings.n, prompt_ids=[ids[i] for i in idx],
                                   progress=bar.callback(bar.completed))
            part = {c: [v[i] for i in idx] for c, v in columns.items()}
            scores = score(rolls, suite, part)
            got = dict(scores.per_reward)
            if extra is not None:  # eval-only rewards: in the rows and reported, never in the total
                got.update(score(rolls, extra, part).per_reward)
            log.write_rollouts(target.step or 0, rolls, Scores(names, got, scores.total))
            totals += scores.total
            for name in names:
                per_reward[name] += got[name]

    def mean(values):
        got = [v for v in values if v is not None]
        return round(statistics.fmean(got), 6) if got else None

    sampling = settings.as_dict()
    means = {name: mean(per_reward[name]) for name in names}
    own = set(suite.names)
    return {**prompt_stats(totals, settings.n, settings.pass_threshold),
            "model": str(target.weights), "data": data, "prompts": len(prompts), "n": settings.n,
            "completions": len(totals), "unscored": sum(v is None for v in totals),
            "per_reward": means, "reward_failures": {name: sum(v is None for v in per_reward[name]) for name in names},
            "rewards": {k: v for k, v in means.items() if k in own},
            "eval_rewards": {k: v for k, v in means.items() if k not in own},
            "eval_set": eval_set(prompts, names, sampling), "sampling": sampling, "out": str(out)}
