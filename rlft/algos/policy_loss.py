"""Policy-gradient losses by name: `grpo.loss_fn`, and PPO's clipped surrogate (`ppo`).

A policy loss is fn(logp_BT, logp_old_BT, adv_BT, mask_BT, clip_range, clip_ratio_c=None) -> (loss, metrics):
the learner's
per-token log-probs, those of the policy the advantages were measured under, the advantages and the action
mask. Each is registered with whether it clips the probability ratio r = exp(logp - logp_old) to
[1 - clip_range, 1 + clip_range]: TRL's GRPOTrainer computes the loss itself and is told the clip that way,
and async training clips a stale batch against the learner only for a clipped loss (decoupled PPO).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

from rlft.algos.kl import masked_mean
from rlft.algos.registry import Registry

PolicyLossFn = Callable[..., tuple]

# exp() of a log-ratio above ~88 is inf in float32 (a NaN loss one step later); as verl, the log-ratio is
# clamped to +-20 before exp (a ratio of 5e8 already means the token's probability moved by 8 orders)
LOG_RATIO_CLAMP = 20.0


def safe_ratio(log_ratio_BT: Tensor) -> Tensor:
    return torch.exp(torch.clamp(log_ratio_BT, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))


@dataclass(frozen=True)
class PolicyLoss:
    fn: PolicyLossFn
    clipped: bool  # the ratio is clipped to [1 - clip_range, 1 + clip_range]; False: never clipped

    def __call__(self, logp_BT: Tensor, logp_old_BT: Tensor, adv_BT: Tensor, mask_BT: Tensor,
                 clip_range: float, clip_ratio_c: float | None = None) -> tuple[Tensor, dict]:
        if self.clipped:
            return self.fn(logp_BT, logp_old_BT, adv_BT, mask_BT, clip_range, clip_ratio_c)
        return self.fn(logp_BT, logp_old_BT, adv_BT, mask_BT, clip_range)


POLICY_LOSSES: Registry[PolicyLoss] = Registry("loss_fn")


def register_policy_loss(name: str, *, clipped: bool) -> Callable[[PolicyLossFn], PolicyLossFn]:
    def deco(fn: PolicyLossFn) -> PolicyLossFn:
        POLICY_LOSSES.register(name)(PolicyLoss(fn, clipped))
        return fn

    return deco


@register_policy_loss("importance_sampling", clipped=False)
def importance_sampling(logp_BT: Tensor, logp_old_BT: Tensor, adv_BT: Tensor, mask_BT: Tensor,
                        clip_range: float | None = None) -> tuple[Tensor, dict]:
    """mean_m(-A r), r = exp(logp - logp_old): the policy gradient with the ratio correcting for the sampler,
    never clipped (`clip_range` is not used), as tinker-cookbook's `importance_sampling` loss."""
    log_ratio_BT = logp_BT - logp_old_BT
    ratio_BT = safe_ratio(log_ratio_BT)
    loss = masked_mean(-adv_BT * ratio_BT, mask_BT)
    with torch.no_grad():
        metrics = {
            "approx_kl": float(masked_mean(0.5 * log_ratio_BT**2, mask_BT)),
            "ratio": float(masked_mean(ratio_BT, mask_BT)),
        }
    return loss, metrics


@register_policy_loss("ppo", clipped=True)
def clipped_surrogate(logp_BT: Tensor, logp_old_BT: Tensor, adv_BT: Tensor, mask_BT: Tensor,
                      clip_range: float, clip_ratio_c: float | None = None) -> tuple[Tensor, dict]:
    """PPO policy loss mean_m max(-A r, -A clip(r, 1 - eps, 1 + eps)), r = exp(logp - logp_old).

    `clip_ratio_c` (> 1, dual-clip PPO, Ye et al. 2020, as verl): where A < 0 the loss is also capped at
    -A c, so a token whose ratio exploded cannot dominate the batch. Metrics: ``clipfrac`` (share of tokens
    where the clipped term wins), ``approx_kl`` (0.5 * mean (logp - logp_old)^2, the learner's drift from the
    sampler in this pass) and, with dual-clip, ``clipfrac_lower`` (share capped at -A c).
    """
    log_ratio_BT = logp_BT - logp_old_BT
    ratio_BT = safe_ratio(log_ratio_BT)
    loss1_BT = -adv_BT * ratio_BT
    loss2_BT = -adv_BT * torch.clamp(ratio_BT, 1.0 - clip_range, 1.0 + clip_range)
    clipped_BT = torch.max(loss1_BT, loss2_BT)
    dual_BT = None
    if clip_ratio_c is not None:
        loss3_BT = -adv_BT * clip_ratio_c
        dual_BT = (adv_BT < 0) & (loss3_BT < clipped_BT)
        clipped_BT = torch.where(adv_BT < 0, torch.min(clipped_BT, loss3_BT), clipped_BT)
    loss = masked_mean(clipped_BT, mask_BT)
    with torch.no_grad():
        metrics = {
            "clipfrac": float(masked_mean((loss2_BT > loss1_BT).to(adv_BT.dtype), mask_BT)),
            "approx_kl": float(masked_mean(0.5 * log_ratio_BT**2, mask_BT)),
            "ratio": float(masked_mean(ratio_BT, mask_BT)),
        }
        if dual_BT is not None:
            metrics["clipfrac_lower"] = float(masked_mean(dual_BT.to(adv_BT.dtype), mask_BT))
    return loss, metrics

