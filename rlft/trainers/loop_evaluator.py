"""Evaluation for rlft's PPO loop: `evaluate(policy, step)` on the evaluation prompts (single-turn, through the
stage's evaluation) or episodes (with an environment), and the run's eval start it keeps for the checkpoints (the
run lifecycle, rlft.runtime.lifecycle, takes eval.start / eval.end through `evaluate`)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Callable

import torch

from rlft.rollout.episodes import episode_metrics

if TYPE_CHECKING:
    from rlft.rollout.collector import RolloutCollector


class LoopEvaluator:
    """`evaluation`: (policy, step) -> {"reward_mean", "n", ...} on the evaluation prompts, or None; with an
    environment and `episode_eval_rows`, fresh episodes on those rows instead."""

    def __init__(self, cfg, section, collector: RolloutCollector, evaluation: Callable | None = None,
                 episode_eval_rows: list[dict] | None = None):
        self.cfg, self.section, self.collector = cfg, section, collector
        self.episode_eval_rows = episode_eval_rows or []
        self.episodes = collector.env_factory is not None and bool(self.episode_eval_rows)
        self.evaluation = evaluation

    @property
    def enabled(self) -> bool:
        return self.episodes or self.evaluation is not None

    def evaluate(self, policy, step: int) -> dict | None:
        """Fresh samples on the evaluation prompts (their own seed, training RNG untouched); single-turn samples go
        to the evaluation's completions as `eval-<i>` rows. None without an evaluation."""
        if self.episodes:
            return self._evaluate_episodes(policy)
        return self.evaluation(policy, step) if self.evaluation is not None else None

    @torch.no_grad()
    def _evaluate_episodes(self, policy) -> dict:
        """Mean episode return and success rate of fresh episodes per evaluation row (`eval:` over the stage's
        defaults: one episode at its sampling settings; pass@n counts a row whose best return reaches
        eval.pass_threshold), with a fixed seed and the training RNG untouched; env faults here stay out of the
        failure guard."""
        from rlft.config.eval_sampling import EvalSettings, eval_sampling
        from rlft.rollout import sampling_params
        from rlft.rollout.eval_stats import prompt_stats

        sec, c = self.section, self.collector
        settings = eval_sampling(self.cfg, EvalSettings(n=1, max_new_tokens=sec.max_tokens,
                                                        temperature=sec.temperature, top_p=sec.top_p))
        rows = [row for row in self.episode_eval_rows for _ in range(settings.n)]  # row-major, n episodes each
        params = sampling_params(settings, self.cfg.train.seed, None)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(params.seed)
            sampler = (policy, c.tokenizer, c.envs_for(len(rows)))
            eps = c.sample_episodes(rows, sampler, params=dataclasses.replace(params, seed=None)).episodes
        m = episode_metrics(eps)
        return {**prompt_stats([ep.return_ for ep in eps], settings.n, settings.pass_threshold),
                "reward_mean": round(m["episode_return"], 6), "success_rate": round(m["success_rate"], 6),
                "episode_length": round(m["episode_length"], 6), "n": len(eps), "prompts": len(self.episode_eval_rows),
                "sampling": settings.as_dict()}
