"""Advantage-weighted regression (AWR, Peng et al. 2019) on sampled completions.

Every sampled completion gets one weight from its sequence-level advantage; the policy is then
trained by weighted negative log-likelihood on its completion tokens.

    A   = total - baseline                  (group_mean: its prompt's group; global_mean: all samples)
    Â   = (A - mean A) / (std A + 1e-8)      over the whole sampled set, when normalising
    w   = min(exp(beta * Â), clip)

`beta` multiplies: it is 1/τ of Peng et al.'s exp(A / τ), so a larger beta weights the best samples
more strongly (the staged guide's "1-3 weak, 5-10 strong"). The std is the population std, as in the
reference implementation (np.std). Completions without a score (a reward failed) get weight 0 and
take no part in the baseline or the normalisation.

Tensors in, tensors out, no trainer state. Rewards arrive flat and group-ordered, as everywhere in
rlft: ``totals_PG[p * G + g]`` is completion g of prompt p.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rlft.algos.advantages import group_advantages

AWR_BASELINES = ("group_mean", "global_mean")
NORM_EPS = 1e-8


def _valid(x: Tensor, valid: Tensor | None) -> Tensor:
    mask = torch.isfinite(x)
    return mask if valid is None else mask & valid.to(device=x.device, dtype=torch.bool)


def awr_advantages(totals_PG: Tensor, group_size: int, baseline: str = "group_mean",
                   *, valid: Tensor | None = None) -> Tensor:
    """A = total − baseline per completion (0 where there is no score)."""
    if baseline not in AWR_BASELINES:
        raise ValueError(f"unknown AWR baseline {baseline!r}; valid: {', '.join(AWR_BASELINES)}")
    return group_advantages(totals_PG, group_size, baseline, valid=_valid(totals_PG, valid))


def normalize_advantages(adv_N: Tensor, *, valid: Tensor | None = None, eps: float = NORM_EPS) -> Tensor:
    """(A − mean) / (population std + eps) over the valid entries; invalid entries become 0."""
    v = _valid(adv_N, valid)
    if not bool(v.any()):
        return torch.zeros_like(adv_N)
    x = adv_N[v]
    z = (adv_N - x.mean()) / (x.std(unbiased=False) + eps)
    return torch.where(v, z, torch.zeros_like(adv_N))


def awr_weights(advantages_N: Tensor, beta: float, clip: float, normalize: bool = True,
                *, valid: Tensor | None = None) -> Tensor:
    """w = min(exp(beta * Â), clip), Â normalised over the whole set when `normalize`; 0 where invalid."""
    if beta <= 0 or clip <= 0:
        raise ValueError(f"beta ({beta}) and clip ({clip}) must be positive")
    v = _valid(advantages_N, valid)
    a = normalize_advantages(advantages_N, valid=v) if normalize else torch.where(v, advantages_N, 0.0)
    w = torch.exp(beta * a).clamp(max=clip)
    return torch.where(v, w, torch.zeros_like(w))


def effective_sample_size(weights_N: Tensor) -> Tensor:
    """(Σw)² / (N Σw²) over the N given weights, in [1/N, 1]: 1 = uniform weights, 1/N = one sample
    carries everything. 0 when every weight is 0."""
    s, s2 = weights_N.sum(), (weights_N ** 2).sum()
    n = weights_N.numel()
    if n == 0 or float(s2) == 0.0:
        return torch.zeros((), dtype=weights_N.dtype)
    return s * s / (n * s2)


def fraction_clipped(weights_N: Tensor, clip: float) -> Tensor:
    """Share of weights at the clip value."""
    if weights_N.numel() == 0:
        return torch.zeros((), dtype=weights_N.dtype)
    return (weights_N >= clip).to(weights_N.dtype).mean()


def awr_metrics(advantages_N: Tensor, weights_N: Tensor, clip: float, *, valid: Tensor | None = None) -> dict:
    """The AWR diagnostics over the valid samples: weight mean/max, fraction clipped, ESS, advantage mean/std."""
    v = _valid(advantages_N, valid)
    a, w = advantages_N[v], weights_N[v]
    if a.numel() == 0:
        return {"weight_mean": None, "weight_max": None, "frac_clipped": None, "ess": None,
                "advantage_mean": None, "advantage_std": None}
    return {
        "weight_mean": w.mean().item(),
        "weight_max": w.max().item(),
        "frac_clipped": fraction_clipped(w, clip).item(),
        "ess": effective_sample_size(w).item(),
        "advantage_mean": a.mean().item(),
        "advantage_std": a.std(unbiased=False).item(),
    }


def weighted_nll(logp_BT: Tensor, mask_BT: Tensor, weights_B: Tensor,
                 num_tokens: Tensor | float | None = None) -> Tensor:
    """−Σ_i w_i Σ_t m_it log π(y_it) / num_tokens.

    One weight per sequence, broadcast over its completion tokens and detached. `num_tokens` is the
    count of loss tokens in the whole optimizer step (the trainer's `num_items_in_batch`), or this
    batch's count when None. Weights are not renormalised per batch (no division by Σw): a batch of
    low-weight samples moves the policy less, which is the point of the weighting.
    """
    m = mask_BT.to(logp_BT.dtype)
    w = weights_B.detach().to(logp_BT.dtype).unsqueeze(1)
    denom = m.sum() if num_tokens is None else torch.as_tensor(num_tokens, dtype=logp_BT.dtype, device=logp_BT.device)
    return -(w * m * logp_BT).sum() / denom.clamp(min=1)
