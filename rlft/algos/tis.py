"""Truncated importance sampling (TIS): the correction for a sampler that is not exactly the learner.

An inference engine (vLLM) computes the same policy with other kernels, and in another dtype when asked, so the
tokens it draws come from pi_sampler, not from the pi_learner the loss differentiates. TIS (Yao et al. 2025, "Your
efficient RL framework secretly brings you off-policy RL training"; verl's rollout correction, TRL's
`vllm_importance_sampling_cap`) weighs each token's advantage by pi_learner / pi_sampler, truncated at a cap so a
few tokens the sampler found unlikely cannot dominate the batch. With the samplers agreeing every weight is 1.
"""

from __future__ import annotations

import torch
from torch import Tensor


def tis_weights(logp_learner_BT: Tensor, logp_sampler_BT: Tensor, mask_BT: Tensor, cap: float) -> Tensor:
    """min(pi_learner / pi_sampler, cap) per token, 0 where mask is 0; no gradient."""
    if not cap > 0:
        raise ValueError(f"the TIS cap must be > 0, got {cap}")
    w = torch.exp((logp_learner_BT - logp_sampler_BT).detach().float()).clamp(max=cap)
    return w * mask_BT.to(w.dtype)


def tis_metrics(logp_learner_BT: Tensor, logp_sampler_BT: Tensor, mask_BT: Tensor, cap: float) -> dict[str, float]:
    """tis/weight_mean (mean truncated weight over the masked tokens) and tis/frac_capped (share of them whose
    untruncated ratio exceeded the cap)."""
    m = mask_BT.to(torch.float32)
    n = m.sum().clamp_min(1.0)
    ratio = torch.exp((logp_learner_BT - logp_sampler_BT).detach().float())
    w = ratio.clamp(max=cap)
    capped = ((ratio > cap).float() * m).sum() / n
    return {"tis/weight_mean": float((w * m).sum() / n), "tis/frac_capped": float(capped)}
