"""Policy-gradient losses by name (`grpo.loss_fn`, PPO's clipped `ppo`), and how a per-token loss is averaged
(`grpo.loss_agg`).

A policy loss is fn(logp_BT, logp_old_BT, adv_BT, mask_BT, clip_range, clip_ratio_c=None, *, clip_high=None,
is_level="token", loss_agg="token_mean", max_tokens=None) -> (loss, metrics): the learner's per-token log-probs,
those of the policy the advantages were measured under, the advantages and the action mask, then the clip (low
side `clip_range`, high side `clip_high`, null = `clip_range`; dual-clip cap `clip_ratio_c`), the importance
ratio's level (`token`, or GSPO's `sequence`) and the aggregation over tokens (`LOSS_AGGREGATIONS`). Each loss is
registered with whether it reads the clip: TRL's GRPOTrainer computes single-turn GRPO's loss itself and is told
the clip that way (rlft/stages/grpo/runner.py), and async training clips a stale batch against the learner only
for a clipped loss (decoupled PPO).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

from rlft.algos.kl import approx_kl, masked_mean
from rlft.algos.registry import Registry

PolicyLossFn = Callable[..., tuple]

# exp() of a log-ratio above ~88 is inf in float32 (a NaN loss one step later); as verl, the log-ratio is
# clamped to +-20 before exp (a ratio of 5e8 already means the token's probability moved by 8 orders)
LOG_RATIO_CLAMP = 20.0


def safe_ratio(log_ratio_BT: Tensor) -> Tensor:
    return torch.exp(torch.clamp(log_ratio_BT, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))


AggregationFn = Callable[[Tensor, Tensor, "int | None"], Tensor]
LOSS_AGGREGATIONS: Registry[AggregationFn] = Registry("loss aggregation")


@LOSS_AGGREGATIONS.register("token_mean")
def _token_mean(loss_BT: Tensor, mask_BT: Tensor, max_tokens: int | None = None) -> Tensor:
    """DAPO: the mean over every action token of the batch (a long sequence weighs by its length)."""
    return masked_mean(loss_BT, mask_BT)


@LOSS_AGGREGATIONS.register("seq_mean_token_mean")
def _seq_mean_token_mean(loss_BT: Tensor, mask_BT: Tensor, max_tokens: int | None = None) -> Tensor:
    """GRPO paper: the mean over each sequence's tokens, then over sequences (every sequence weighs the same)."""
    m = mask_BT.to(loss_BT.dtype)
    x = torch.where(m > 0, loss_BT, torch.zeros_like(loss_BT))
    return ((x * m).sum(-1) / m.sum(-1).clamp(min=1.0)).mean()


@LOSS_AGGREGATIONS.register("seq_mean_token_sum_norm")
def _seq_mean_token_sum_norm(loss_BT: Tensor, mask_BT: Tensor, max_tokens: int | None = None) -> Tensor:
    """Dr. GRPO: each sequence's token sum over the constant `max_tokens`, then the mean over sequences (no
    length bias: a token weighs the same in a short sequence and a long one)."""
    if not max_tokens or max_tokens < 1:
        raise ValueError("seq_mean_token_sum_norm needs max_tokens >= 1 (grpo.max_tokens)")
    m = mask_BT.to(loss_BT.dtype)
    x = torch.where(m > 0, loss_BT, torch.zeros_like(loss_BT))
    return (x * m).sum() / (loss_BT.shape[0] * max_tokens)


def aggregate_loss(loss_BT: Tensor, mask_BT: Tensor, mode: str = "token_mean", max_tokens: int | None = None) -> Tensor:
    """One scalar from a per-token loss: `mode` in LOSS_AGGREGATIONS (`grpo.loss_agg`)."""
    return LOSS_AGGREGATIONS.get(mode)(loss_BT.expand_as(mask_BT), mask_BT, max_tokens)


IS_LEVELS = ("token", "sequence")


def log_importance_weights(log_ratio_BT: Tensor, mask_BT: Tensor, level: str = "token") -> Tensor:
    """The log importance weight: per token (B, T), or GSPO's per sequence (B, 1), the mean over the sequence's
    action tokens of logp - logp_old, applied to each of its tokens (TRL's importance_sampling_level)."""
    if level == "token":
        return log_ratio_BT
    if level != "sequence":
        raise ValueError(f"unknown importance-sampling level {level!r}; allowed: {', '.join(IS_LEVELS)}")
    m = mask_BT.to(log_ratio_BT.dtype)
    x = torch.where(m > 0, log_ratio_BT, torch.zeros_like(log_ratio_BT))
    return ((x * m).sum(-1) / m.sum(-1).clamp(min=1.0)).unsqueeze(-1)


@dataclass(frozen=True)
class PolicyLoss:
    fn: PolicyLossFn
    clipped: bool  # reads the clip (clip_range, clip_high, clip_ratio_c); False: the ratio is never clipped

    def __call__(self, logp_BT: Tensor, logp_old_BT: Tensor, adv_BT: Tensor, mask_BT: Tensor,
                 clip_range: float, clip_ratio_c: float | None = None, *, clip_high: float | None = None,
                 is_level: str = "token", loss_agg: str = "token_mean",
                 max_tokens: int | None = None) -> tuple[Tensor, dict]:
        common = dict(is_level=is_level, loss_agg=loss_agg, max_tokens=max_tokens)
        if self.clipped:
            return self.fn(logp_BT, logp_old_BT, adv_BT, mask_BT, clip_range, clip_ratio_c, clip_high=clip_high,
                           **common)
        return self.fn(logp_BT, logp_old_BT, adv_BT, mask_BT, clip_range, **common)


POLICY_LOSSES: Registry[PolicyLoss] = Registry("loss_fn")


def register_policy_loss(name: str, *, clipped: bool) -> Callable[[PolicyLossFn], PolicyLossFn]:
    def deco(fn: PolicyLossFn) -> PolicyLossFn:
        POLICY_LOSSES.register(name)(PolicyLoss(fn, clipped))
        return fn

    return deco


def _ratio(logp_BT: Tensor, logp_old_BT: Tensor, mask_BT: Tensor, is_level: str) -> tuple[Tensor, Tensor]:
    """(log_ratio_BT, ratio): the per-token log-ratio (for metrics) and the importance ratio at `is_level`,
    (B, T) or (B, 1)."""
    log_ratio_BT = logp_BT - logp_old_BT
    return log_ratio_BT, safe_ratio(log_importance_weights(log_ratio_BT, mask_BT, is_level))


def _drift_metrics(log_ratio_BT: Tensor, ratio: Tensor, mask_BT: Tensor) -> dict:
    return {"approx_kl": float(approx_kl(log_ratio_BT, mask_BT)),
            "ratio": float(masked_mean(ratio.expand_as(mask_BT), mask_BT))}


@register_policy_loss("importance_sampling", clipped=False)
def importance_sampling(logp_BT: Tensor, logp_old_BT: Tensor, adv_BT: Tensor, mask_BT: Tensor,
                        clip_range: float | None = None, *, is_level: str = "token", loss_agg: str = "token_mean",
                        max_tokens: int | None = None) -> tuple[Tensor, dict]:
    """agg(-A r), r = exp(logp - logp_old): the policy gradient with the ratio correcting for the sampler,
    never clipped (`clip_range` is not used), as tinker-cookbook's `importance_sampling` loss."""
    log_ratio_BT, ratio = _ratio(logp_BT, logp_old_BT, mask_BT, is_level)
    loss = aggregate_loss(-adv_BT * ratio, mask_BT, loss_agg, max_tokens)
    with torch.no_grad():
        metrics = _drift_metrics(log_ratio_BT, ratio, mask_BT)
    return loss, metrics


@register_policy_loss("ppo", clipped=True)
def clipped_surrogate(logp_BT: Tensor, logp_old_BT: Tensor, adv_BT: Tensor, mask_BT: Tensor,
                      clip_range: float, clip_ratio_c: float | None = None, *, clip_high: float | None = None,
                      is_level: str = "token", loss_agg: str = "token_mean",
                      max_tokens: int | None = None) -> tuple[Tensor, dict]:
    """PPO policy loss agg max(-A r, -A clip(r, 1 - eps_low, 1 + eps_high)), r = exp(logp - logp_old),
    eps_low = `clip_range`, eps_high = `clip_high` (null = `clip_range`; DAPO's clip-higher sets it above).

    `clip_ratio_c` (> 1 + eps_high, dual-clip PPO, Ye et al. 2020, as verl): where A < 0 the loss is also capped
    at -A c, so a token whose ratio exploded cannot dominate the batch (TRL's `delta` is the same cap written as
    min(r, delta)). Metrics: ``clipfrac`` (share of tokens where the clipped term wins), ``approx_kl`` (0.5 * mean
    (logp - logp_old)^2, the learner's drift from the sampler in this pass) and, with dual-clip,
    ``clipfrac_lower`` (share capped at -A c).
    """
    high = clip_range if clip_high is None else clip_high
    log_ratio_BT, ratio = _ratio(logp_BT, logp_old_BT, mask_BT, is_level)
    loss1_BT = -adv_BT * ratio
    loss2_BT = -adv_BT * torch.clamp(ratio, 1.0 - clip_range, 1.0 + high)
    clipped_BT = torch.max(loss1_BT, loss2_BT)
    dual_BT = None
    if clip_ratio_c is not None:
        loss3_BT = -adv_BT * clip_ratio_c
        dual_BT = (adv_BT < 0) & (loss3_BT < clipped_BT)
        clipped_BT = torch.where(adv_BT < 0, torch.min(clipped_BT, loss3_BT), clipped_BT)
    loss = aggregate_loss(clipped_BT, mask_BT, loss_agg, max_tokens)
    with torch.no_grad():
        metrics = {"clipfrac": float(masked_mean((loss2_BT > loss1_BT).to(adv_BT.dtype).expand_as(mask_BT),
                                                 mask_BT)),
                   **_drift_metrics(log_ratio_BT, ratio, mask_BT)}
        if dual_BT is not None:
            metrics["clipfrac_lower"] = float(masked_mean(dual_BT.to(adv_BT.dtype).expand_as(mask_BT), mask_BT))
    return loss, metrics


@register_policy_loss("cispo", clipped=True)
def cispo(logp_BT: Tensor, logp_old_BT: Tensor, adv_BT: Tensor, mask_BT: Tensor, clip_range: float,
          clip_ratio_c: float | None = None, *, clip_high: float | None = None, is_level: str = "token",
          loss_agg: str = "token_mean", max_tokens: int | None = None) -> tuple[Tensor, dict]:
    """CISPO (MiniMax-M1): agg(-sg(min(r, 1 + eps_high)) A logp), eps_high = `clip_high` (null = `clip_range`).
    The importance weight is capped and carries no gradient, so every token keeps its gradient through logp
    (PPO's clip zeroes it); TRL's loss_type cispo with epsilon_high = 1 + eps_high. `clip_ratio_c` is not read."""
    high = clip_range if clip_high is None else clip_high
    log_ratio_BT, ratio = _ratio(logp_BT, logp_old_BT, mask_BT, is_level)
    weight = torch.clamp(ratio, max=1.0 + high).detach()
    loss = aggregate_loss(-weight * adv_BT * logp_BT, mask_BT, loss_agg, max_tokens)
    with torch.no_grad():
        metrics = {"clipfrac": float(masked_mean((ratio > 1.0 + high).to(adv_BT.dtype).expand_as(mask_BT), mask_BT)),
                   **_drift_metrics(log_ratio_BT, ratio, mask_BT)}
    return loss, metrics


@dataclass(frozen=True)
class LossSettings:
    """One GRPO policy loss as `grpo.*` chooses it (`loss_settings`), whichever path computes it: rlft's episode
    loop calls `grpo_policy_loss`, single-turn GRPO hands the same settings to TRL (rlft/stages/grpo/runner.py)."""
    loss_fn: str = "importance_sampling"
    clip_low: float = 0.2
    clip_high: float | None = None      # null = clip_low here; `loss_settings` resolves grpo's null to clip_range
    clip_ratio_c: float | None = None   # dual-clip cap (PPO's loss only)
    is_level: str = "token"
    loss_agg: str = "token_mean"
    max_tokens: int | None = None       # Dr. GRPO's constant (seq_mean_token_sum_norm)

    @property
    def high(self) -> float:
        return self.clip_low if self.clip_high is None else self.clip_high


def loss_settings(section) -> LossSettings:
    """The settings from a `grpo` config section: clip_low and clip_high null each mean clip_range (as documented,
    and as verl's clip_ratio_low/high and TRL's epsilon/epsilon_high fall back), so clip_low alone never moves
    the upper clip."""
    low = section.clip_low if section.clip_low is not None else section.clip_range
    high = section.clip_high if section.clip_high is not None else section.clip_range
    return LossSettings(loss_fn=section.loss_fn, clip_low=low, clip_high=high,
                        clip_ratio_c=section.clip_ratio_c, is_level=section.is_level, loss_agg=section.loss_agg,
                        max_tokens=section.max_tokens)


def grpo_policy_loss(s: LossSettings, logp_BT: Tensor, logp_old_BT: Tensor, adv_BT: Tensor,
                     mask_BT: Tensor) -> tuple[Tensor, dict]:
    """The policy loss `s` names, on the learner's log-probs, the old ones, the advantages and the action mask."""
    return POLICY_LOSSES.get(s.loss_fn)(logp_BT, logp_old_BT, adv_BT, mask_BT, s.clip_low, s.clip_ratio_c,
                                        clip_high=s.high, is_level=s.is_level, loss_agg=s.loss_agg,
                                        max_tokens=s.max_tokens)
