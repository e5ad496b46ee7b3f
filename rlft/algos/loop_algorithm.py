"""Which algorithm rlft's PPO loop runs: the pieces it looks up by name (advantage estimator, policy loss, KL
estimator) and the numbers it needs, read from the stage's section (`ppo`, or `grpo` over episodes)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rlft.algos.schedule import LoopSchedule, episode_grpo_loop_schedule, ppo_loop_schedule

if TYPE_CHECKING:
    from rlft.config.schema import RlftConfig


@dataclass(frozen=True)
class LoopAlgorithm:
    estimator: str            # in rlft.trainers.advantage_steps.ADVANTAGE_ESTIMATORS (its step and loss)
    policy_loss: str          # in rlft.algos.POLICY_LOSSES
    kl_estimator: str         # in rlft.algos.KL_ESTIMATORS: the per-token KL in the reward or the advantage
    initial_kl_coef: float
    schedule: LoopSchedule
    group_size: int = 1       # each row sampled this many times in a row (a GRPO group)
    dynamic_sampling: bool = False  # DAPO: resample until the update's groups carry signal
    mask_truncated: bool = False  # rows with an action cut at max_tokens (no EOS) give no gradient


def ppo_algorithm(cfg: RlftConfig) -> LoopAlgorithm:
    """PPO on `cfg.ppo`: GAE over a critic, the clipped `ppo` loss, the KL in the reward."""
    p = cfg.ppo
    return LoopAlgorithm("gae", "ppo", p.kl_penalty, p.init_kl_coef, ppo_loop_schedule(cfg),
                         mask_truncated=p.mask_truncated)


def episode_grpo_algorithm(cfg: RlftConfig, num_rows: int) -> LoopAlgorithm:
    """GRPO on `cfg.grpo` over episodes: group baselines of episode returns (no critic), grpo.loss_fn's loss, the
    log-ratio KL in the advantage."""
    g = cfg.grpo
    return LoopAlgorithm("episode_returns", g.loss_fn, "kl", g.kl_penalty_coef,
                         episode_grpo_loop_schedule(cfg, num_rows), g.group_size, g.dynamic_sampling,
                         g.mask_truncated)
