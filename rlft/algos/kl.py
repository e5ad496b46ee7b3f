"""KL estimators and the KL-penalty-in-the-advantage trick.

Shapes: ``B`` sequences by ``T`` tokens; ``mask_BT`` is 1 on action (sampled
completion) tokens and 0 on prompt/padding tokens.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from rlft.algos.registry import Registry


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``x`` over positions where ``mask`` > 0; 0 when the mask is empty."""
    m = mask.to(x.dtype)
    x = torch.where(m > 0, x, torch.zeros_like(x))  # masked-out NaN/inf must not leak
    return (x * m).sum() / m.sum().clamp_min(1e-8)


def approx_kl(log_ratio_BT: Tensor, mask_BT: Tensor) -> Tensor:
    """The learner's drift from the sampling policy: 0.5 * mean over action tokens of (log pi - log pi_old)^2
    (PPO's `approx_kl` metric, and what `early_stop_kl`/`rollback_kl` compare)."""
    return masked_mean(0.5 * log_ratio_BT**2, mask_BT)


def entropy_from_logp(logp_sample: Tensor, mask: Tensor) -> Tensor:
    """Sampling-entropy estimate: -E[log p(sampled token)], as tinker-cookbook logs it."""
    return -masked_mean(logp_sample, mask)


def discounted_future_sum(x_BT: Tensor, gamma: float) -> Tensor:
    """y_t = sum_{s>=t} gamma^(s-t) x_s per row, so a token owns the penalty of what follows."""
    if gamma == 0.0:
        return x_BT.clone()
    out_BT = torch.empty_like(x_BT)
    running_B = torch.zeros_like(x_BT[:, 0])
    for t in range(x_BT.shape[1] - 1, -1, -1):
        running_B = x_BT[:, t] + gamma * running_B
        out_BT[:, t] = running_B
    return out_BT


def kl_penalty_advantages(
    advantages: Tensor,
    logp_sample: Tensor,
    logp_ref: Tensor,
    mask: Tensor,
    coef: float,
    discount: float = 0.0,
) -> tuple[Tensor, dict]:
    """Fold a KL(policy || ref) penalty into per-token advantages.

    tinker-cookbook's ``incorporate_kl_penalty``: each token's advantage gains
    ``coef * (dbar - d_t)``, where ``d_t`` is its sample-vs-reference log-ratio
    and ``dbar`` the batch mean over all action tokens. Centring on ``dbar``
    keeps the penalty zero-mean, so it reshapes credit without shifting the
    overall advantage scale. ``discount > 0`` lets a token also pay for the
    divergence of later tokens it caused.

    ``advantages`` is (B,) (one per sequence) or (B, T); returns ``(adv_BT, metrics)``.
    """
    m_BT = mask.to(logp_sample.dtype)
    d_BT = (logp_sample - logp_ref) * m_BT
    n = m_BT.sum()
    dbar = d_BT.sum() / n if n > 0 else d_BT.new_zeros(())
    k_BT = coef * m_BT * (dbar - d_BT)
    if discount > 0:
        k_BT = discounted_future_sum(k_BT, discount)
    adv = advantages.to(k_BT.dtype)
    adv_BT = adv.unsqueeze(1) if adv.dim() == 1 else adv
    return (adv_BT + k_BT) * m_BT, {"kl_policy_ref": float(dbar)}


def kl_sample_train(logp_sample: Tensor, logp_train: Tensor, mask: Tensor) -> dict:
    """Sampler-vs-trainer log-prob mismatch: v1 = mean(d), v2 = 0.5 * mean(d^2).

    Non-zero values flag numerics drift between generation and training
    (different kernels, dtypes, stale weights), i.e. how off-policy "on-policy" is.
    """
    d = (logp_sample - logp_train)[mask > 0].double()
    if d.numel() == 0:
        return {"kl_sample_train_v1": 0.0, "kl_sample_train_v2": 0.0}
    return {
        "kl_sample_train_v1": float(d.mean()),
        "kl_sample_train_v2": float(0.5 * (d**2).mean()),
    }


def k3_kl(logp_policy: Tensor, logp_ref: Tensor) -> Tensor:
    """Per-token k3 estimator exp(r) - r - 1, r = ref - policy: unbiased and >= 0.

    The log-ratio is clamped to [-20, 20] so exp cannot overflow to inf/NaN.
    """
    log_ratio = (logp_ref - logp_policy).clamp(-20.0, 20.0)
    return torch.exp(log_ratio) - log_ratio - 1


KLEstimator = Callable[..., Tensor]

#: Per-token KL(policy || ref) estimates for PPO's reward shaping (`ppo.kl_penalty`), in nats per token:
#: fn(logp_BT, logp_ref_BT, logp_BTV=None, logp_ref_BTV=None) -> kl_BT; the full-vocabulary log-probabilities
#: are passed for estimators that need them.
KL_ESTIMATORS: Registry[KLEstimator] = Registry("kl_penalty")


@KL_ESTIMATORS.register("kl")
def kl_log_ratio(logp_BT: Tensor, logp_ref_BT: Tensor, logp_BTV=None, logp_ref_BTV=None) -> Tensor:
    """k1: the log-ratio d = logp - logp_ref (unbiased, can be negative)."""
    return logp_BT - logp_ref_BT


@KL_ESTIMATORS.register("abs")
def kl_abs(logp_BT: Tensor, logp_ref_BT: Tensor, logp_BTV=None, logp_ref_BTV=None) -> Tensor:
    """|d|."""
    return (logp_BT - logp_ref_BT).abs()


@KL_ESTIMATORS.register("mse")
def kl_mse(logp_BT: Tensor, logp_ref_BT: Tensor, logp_BTV=None, logp_ref_BTV=None) -> Tensor:
    """k2: d^2 / 2."""
    return 0.5 * (logp_BT - logp_ref_BT) ** 2


@KL_ESTIMATORS.register("full")
def kl_full(logp_BT: Tensor, logp_ref_BT: Tensor, logp_BTV: Tensor | None = None,
            logp_ref_BTV: Tensor | None = None) -> Tensor:
    """Exact sum_v p(v) (log p(v) - log p_ref(v)) over the vocabulary."""
    if logp_BTV is None or logp_ref_BTV is None:
        raise ValueError("kl_penalty 'full' needs the full-vocabulary log-probabilities of policy and reference")
    return (logp_BTV.exp() * (logp_BTV - logp_ref_BTV)).sum(dim=-1)


KL_PENALTIES = KL_ESTIMATORS.names()


def kl_penalty_per_token(logp_BT: Tensor, logp_ref_BT: Tensor, kind: str = "kl",
                         logp_BTV: Tensor | None = None, logp_ref_BTV: Tensor | None = None) -> Tensor:
    """Per-token KL(policy || ref) estimate `kind` (a name in KL_ESTIMATORS), in nats per token."""
    return KL_ESTIMATORS.get(kind)(logp_BT, logp_ref_BT, logp_BTV, logp_ref_BTV)
