"""Gradient clipping for a policy with a value head (rlft's PPO loop, rlft.trainers.ppo)."""

from __future__ import annotations

import torch

__all__ = ["clip_each_part"]


def clip_each_part(accelerator, model, limit: float) -> float:
    """Clips `model`'s gradients at `limit`; returns their norm before clipping. With a separate critic the policy's
    and the critic's are clipped each on their own, so a large value loss cannot shrink the policy's step (the
    returned norm is still the whole model's)."""
    unwrapped = accelerator.unwrap_model(model)
    if unwrapped.critic is None:
        return float(accelerator.clip_grad_norm_(model.parameters(), limit))
    accelerator.unscale_gradients()  # once (fp16's scaler refuses a second unscale); FSDP is refused with a critic
    policy = float(torch.nn.utils.clip_grad_norm_(unwrapped.policy_parameters(), limit))
    critic = float(torch.nn.utils.clip_grad_norm_(unwrapped.critic_parameters(), limit))
    return (policy ** 2 + critic ** 2) ** 0.5
