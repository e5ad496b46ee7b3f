"""PPO math: reward shaping, GAE(gamma, lambda), whitening, the clipped value loss and the total loss (the
clipped policy loss is in rlft.algos.policy_loss).

Shapes: ``B`` episodes by ``T`` completion tokens; ``mask_BT`` is 1 on action tokens (sampled
by the policy) and 0 on padding and observation tokens. Token ``t``'s value and log-prob are
the ones read *before* it is emitted (position ``t - 1`` of the prompt+completion forward).

The formulas follow Schulman et al. 2017 and the reference implementations (old TRL PPOTrainer,
verl, OpenRLHF); the module owns them because TRL 1.x no longer ships PPO.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rlft.algos.kl import masked_mean
from rlft.algos.policy_loss import POLICY_LOSSES


def masked_var(x: Tensor, mask: Tensor, unbiased: bool = True) -> Tensor:
    """Variance of ``x`` over mask > 0 (Bessel-corrected by default, as TRL/verl whiten)."""
    m = mask.to(x.dtype)
    mean = masked_mean(x, m)
    centred = torch.where(m > 0, x - mean, torch.zeros_like(x))
    var = (centred**2 * m).sum() / m.sum().clamp_min(1e-8)
    if unbiased:
        n = m.sum()
        var = var * n / (n - 1) if n > 1 else var
    return var


def masked_moments(x: Tensor, mask: Tensor) -> Tensor:
    """(3,) float64: the sum of ``x``, the sum of its squares and the count over mask > 0. Moments of several
    batches (e.g. one per process) add up to the moments of their union: sum them, then `masked_whiten(...,
    moments=total)` whitens each batch over all of them."""
    m = mask.to(torch.float64)
    x64 = torch.where(m > 0, x.to(torch.float64), torch.zeros_like(m))  # masked-out NaN/inf must not leak
    return torch.stack([(x64 * m).sum(), (x64 * x64 * m).sum(), m.sum()])


def moments_mean_var(moments: Tensor, unbiased: bool = True) -> tuple[Tensor, Tensor]:
    """(mean, variance) from `masked_moments` (summed over batches): mean = s / n, var = (q - s * mean) / (n - 1)
    (Bessel-corrected, as `masked_var`; the plain (q - s * mean) / n for one element or unbiased=False), in float64."""
    s, q, n = moments.to(torch.float64).unbind()
    mean = s / n.clamp_min(1e-8)
    ss = (q - s * mean).clamp_min(0.0)  # sum of squared deviations; rounding may leave it a hair below 0
    var = ss / (n - 1) if unbiased and n > 1 else ss / n.clamp_min(1e-8)
    return mean, var


def return_scale(moments: Tensor, floor: float = 1.0) -> float:
    """The divisor for every reward: the running standard deviation of episode returns from their accumulated
    `masked_moments` (every batch so far, every process), never below `floor`. It only shrinks: returns that
    spread over tens of units (the tool-use guide's -20..+18) come down to about unit spread, so a value loss of
    ~100 no longer swamps the shared backbone at vf_coef 0.5, while a 0/1 reward (spread < 1) is left as it is,
    since scaling it up would make the value loss the larger term instead. One divisor for all rewards scales
    GAE's advantages by the same number, and whitening removes it."""
    if float(moments[2]) < 2:
        return floor
    _, var = moments_mean_var(moments)
    return max(float(var) ** 0.5, floor)


def masked_whiten(x: Tensor, mask: Tensor, shift_mean: bool = True, eps: float = 1e-8,
                  moments: Tensor | None = None) -> Tensor:
    """(x - mean) / sqrt(var + eps) over the masked entries; masked-out entries become 0.

    `moments`: the mean and variance from these `masked_moments` instead of from ``x`` itself, e.g. summed over
    every process's batch so that each process whitens over the global batch (verl); None = over ``x`` alone."""
    m = mask.to(x.dtype)
    if moments is None:
        mean, var = masked_mean(x, m), masked_var(x, m)
    else:
        mean, var = (v.to(x.dtype) for v in moments_mean_var(moments))
    out = (x - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        out = out + mean
    return out * m


ADVANTAGE_NORMS = ("whiten", "center", "none")


def normalize_gae_advantages(adv: Tensor, mask: Tensor, norm: str = "whiten",
                             moments: Tensor | None = None) -> Tensor:
    """GAE's advantages by `norm` (`ppo.advantage_norm`), masked-out entries 0: `whiten` = (A - mean) / std,
    `center` = A - mean, `none` = A as it is. Why not always whiten: when a good policy's returns are nearly
    constant, whitening scales whatever noise is left to unit size. `moments`: as `masked_whiten`'s (the global
    batch's mean, and std, summed over processes); None = over ``adv`` alone."""
    if norm == "whiten":
        return masked_whiten(adv, mask, moments=moments)
    m = mask.to(adv.dtype)
    if norm == "center":
        mean = masked_mean(adv, m) if moments is None else moments_mean_var(moments)[0].to(adv.dtype)
        return (adv - mean) * m
    if norm == "none":
        return adv * m
    raise ValueError(f"unknown advantage normalisation {norm!r}; one of {', '.join(ADVANTAGE_NORMS)}")


def last_token_index(mask_BT: Tensor) -> Tensor:
    """Index of each row's last action token (0 for an empty row)."""
    T = mask_BT.shape[1]
    pos_BT = torch.arange(T, device=mask_BT.device).expand_as(mask_BT)
    return torch.where(mask_BT > 0, pos_BT, torch.zeros_like(pos_BT)).max(dim=1).values


def shape_rewards(scores_B: Tensor, kl_BT: Tensor, mask_BT: Tensor, kl_coef: float) -> Tensor:
    """Per-token rewards: ``-kl_coef * kl_t`` on every action token, plus the episode's score on
    its last action token (a row without a score, NaN, gets the KL part only)."""
    m = mask_BT.to(kl_BT.dtype)
    rewards_BT = -kl_coef * kl_BT * m
    last_B = last_token_index(mask_BT)
    score_B = torch.nan_to_num(scores_B.to(kl_BT.dtype), nan=0.0)
    has_action_B = m.sum(dim=1) > 0
    add_B = torch.where(has_action_B, score_B, torch.zeros_like(score_B))
    return rewards_BT.scatter_add(1, last_B.unsqueeze(1), add_B.unsqueeze(1))


def gae(rewards_BT: Tensor, values_BT: Tensor, mask_BT: Tensor, gamma: float, lam: float) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation over action tokens.

    delta_t = r_t + gamma * V_next - V_t and A_t = delta_t + gamma * lam * A_next, where "next" is
    the next *action* token: masked tokens (observations, padding) are skipped, so a multi-turn
    episode's tool output does not break the chain (verl). Past the last action token V = 0.
    Returns ``(advantages_BT, returns_BT)`` with ``returns = advantages + values``; both are 0 off
    the mask.
    """
    m_BT = mask_BT.to(values_BT.dtype)
    B, T = values_BT.shape
    adv_BT = torch.zeros_like(values_BT)
    next_value_B = values_BT.new_zeros(B)
    next_adv_B = values_BT.new_zeros(B)
    for t in range(T - 1, -1, -1):
        m_B = m_BT[:, t]
        delta_B = rewards_BT[:, t] + gamma * next_value_B - values_BT[:, t]
        adv_B = delta_B + gamma * lam * next_adv_B
        next_value_B = m_B * values_BT[:, t] + (1 - m_B) * next_value_B
        next_adv_B = m_B * adv_B + (1 - m_B) * next_adv_B
        adv_BT[:, t] = adv_B * m_B
    return adv_BT, (adv_BT + values_BT) * m_BT


def value_bias_from_returns(rewards_BT: Tensor, mask_BT: Tensor, gamma: float) -> float:
    """The value head's starting bias: the mean over action tokens of the discounted reward-to-go
    G_t = sum_k gamma^k r_{t+k} (over later action tokens; masked tokens skipped, as `gae` skips them).

    Why: a head that starts at 0 under a policy that already earns a return R makes every token's TD error
    carry R, so lambda-GAE hands the late tokens of a successful answer more advantage than the early ones,
    and whitening turns the early ones negative. Starting the head at the batch's mean target removes that
    bias: when every episode earns the same return, every advantage starts near 0."""
    zeros_BT = torch.zeros_like(rewards_BT)
    _, returns_BT = gae(rewards_BT, zeros_BT, mask_BT, gamma, 1.0)  # lambda 1, V 0: the Monte Carlo returns
    return float(masked_mean(returns_BT, mask_BT))


def clipped_value_loss(values_BT: Tensor, values_old_BT: Tensor, returns_BT: Tensor, mask_BT: Tensor,
                       clip_range_value: float) -> tuple[Tensor, dict]:
    """0.5 * mean_m max((V - G)^2, (clip(V, V_old +- eps_v) - G)^2); metric ``value_clipfrac``."""
    v_clip_BT = values_old_BT + torch.clamp(values_BT - values_old_BT, -clip_range_value, clip_range_value)
    loss1_BT = (values_BT - returns_BT) ** 2
    loss2_BT = (v_clip_BT - returns_BT) ** 2
    loss = 0.5 * masked_mean(torch.max(loss1_BT, loss2_BT), mask_BT)
    with torch.no_grad():
        frac = float(masked_mean((loss2_BT > loss1_BT).to(values_BT.dtype), mask_BT))
    return loss, {"value_clipfrac": frac}


def entropy_from_logits(logits_BTV: Tensor) -> Tensor:
    """Exact per-token entropy of the categorical distribution, (B, T)."""
    logp_BTV = torch.log_softmax(logits_BTV.float(), dim=-1)
    return -(logp_BTV.exp() * logp_BTV).sum(dim=-1)


def ppo_loss(logp_BT: Tensor, logp_old_BT: Tensor, adv_BT: Tensor, values_BT: Tensor, values_old_BT: Tensor,
             returns_BT: Tensor, entropy_BT: Tensor, mask_BT: Tensor, *, clip_range: float,
             clip_range_value: float, vf_coef: float, ent_coef: float,
             policy_loss: str = "ppo", clip_ratio_c: float | None = None,
             train_policy: bool = True) -> tuple[Tensor, dict]:
    """Total PPO loss = policy loss (`policy_loss` in POLICY_LOSSES: the clipped surrogate, dual-clipped at
    `clip_ratio_c` when set) + vf_coef * clipped value loss - ent_coef * entropy.

    `train_policy=False` (a critic warm-up update): the loss is the value term alone; the policy loss and the
    entropy are still reported, so a warm-up row reads like any other."""
    pg, pg_m = POLICY_LOSSES.get(policy_loss)(logp_BT, logp_old_BT, adv_BT, mask_BT, clip_range, clip_ratio_c)
    vf, vf_m = clipped_value_loss(values_BT, values_old_BT, returns_BT, mask_BT, clip_range_value)
    ent = masked_mean(entropy_BT, mask_BT)
    loss = pg + vf_coef * vf - ent_coef * ent if train_policy else vf_coef * vf
    return loss, {"policy_loss": float(pg.detach()), "value_loss": float(vf.detach()),
                  "entropy": float(ent.detach()), **pg_m, **vf_m}


def explained_variance(values_BT: Tensor, returns_BT: Tensor, mask_BT: Tensor) -> float:
    """1 - Var(G - V) / Var(G) over the mask: 1 = perfect critic, 0 = no better than a constant."""
    var_g = masked_var(returns_BT, mask_BT, unbiased=False)
    if float(var_g) == 0.0:
        return float("nan")
    return float(1.0 - masked_var(returns_BT - values_BT, mask_BT, unbiased=False) / var_g)
