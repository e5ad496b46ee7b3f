"""Off-policy correction for batches sampled by an older policy (async training).

Decoupled PPO (Hilton et al. 2021, "Batch size-invariance for policy optimization"; AReaL's async PPO):
the clipped ratio is taken against the *proximal* policy (the learner when the update starts), and the gap
between the proximal and the *behaviour* policy (the sampler's stale weights) is an importance weight on the
advantage. Clipping against the behaviour policy instead would clip away most tokens of a stale batch.
On-policy the two policies are the same and every weight is 1.
"""

from __future__ import annotations

import torch
from torch import Tensor


def behaviour_weights(logp_prox_BT: Tensor, logp_behaviour_BT: Tensor, mask_BT: Tensor,
                      cap: float | None = 5.0) -> Tensor:
    """pi_prox / pi_behaviour per token, truncated at `cap` (None = untruncated), 0 where mask is 0; no gradient."""
    w = torch.exp((logp_prox_BT - logp_behaviour_BT).detach())
    if cap is not None:
        w = w.clamp(max=cap)
    return w * mask_BT.to(w.dtype)
