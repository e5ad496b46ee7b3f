"""Advantage estimators: how one update's rewards become per-token advantages in rlft's own loop (PPO: `gae`;
GRPO over multi-turn episodes: `episode_returns`). Each is registered once, by name, with the loop's step around it
(rlft.trainers.advantage_steps.ADVANTAGE_ESTIMATORS). The group baselines a GRPO group compares against are a
registry of their own (`grpo.baseline_mode`, rlft.algos.advantages).

An estimator takes keyword arguments and returns (adv_BT, returns_BT), returns being the critic's regression
targets (None without a critic). Every estimator takes `mask_BT` (1 on action tokens); the rest is its own:
    rewards_BT       per-token rewards: scores / env step rewards on the last action token (of each turn),
                     -kl_coef * kl_t on every action token
    values_BT        the critic's values, 0 off the mask
    turn_rewards_BK  each episode's step rewards by turn, padding turns 0
and its parameters (gamma, lam, group_size, baseline_mode).
"""

from __future__ import annotations

from typing import Callable

from torch import Tensor

from rlft.algos.advantages import episode_group_advantages
from rlft.algos.ppo import gae, masked_moments, normalize_gae_advantages


def gae_advantages(*, rewards_BT: Tensor, values_BT: Tensor, mask_BT: Tensor, gamma: float, lam: float,
                   sum_over_processes: Callable[[Tensor], Tensor] | None = None,
                   norm: str = "whiten") -> tuple[Tensor, Tensor]:
    """GAE(gamma, lambda) over action tokens, the advantages normalised over the batch by `norm` (`whiten`,
    `center` or `none`: rlft.algos.ppo.normalize_gae_advantages; returns are not).

    `sum_over_processes` (a tensor -> its sum over the processes of a multi-process run, e.g. an all-reduce):
    the normalisation's mean and variance are then the global batch's (`masked_moments` summed), as verl whitens;
    None = this batch's own, computed exactly as for a single process."""
    adv_BT, returns_BT = gae(rewards_BT, values_BT, mask_BT, gamma, lam)
    moments = None
    if sum_over_processes is not None and norm != "none":  # every rank takes part, or none does
        moments = sum_over_processes(masked_moments(adv_BT, mask_BT))
    return normalize_gae_advantages(adv_BT, mask_BT, norm, moments), returns_BT


def episode_return_advantages(*, turn_rewards_BK: Tensor, mask_BT: Tensor, group_size: int, baseline_mode: str,
                              gamma: float) -> tuple[Tensor, None]:
    """Each episode's return sum_k gamma^k r_k against its group's baseline, spread over its action tokens; no
    critic."""
    return episode_group_advantages(turn_rewards_BK, mask_BT, group_size, baseline_mode, gamma), None
