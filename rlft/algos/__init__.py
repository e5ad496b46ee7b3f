"""Pure tensor math for RL fine-tuning: advantages, KL penalties, KL control."""

from rlft.algos.advantages import (
    BASELINE_MODES,
    constant_group_mask,
    expand_group_mask,
    get_baseline,
    group_advantages,
    register_baseline,
)
from rlft.algos.kl import (
    discounted_future_sum,
    entropy_from_logp,
    k3_kl,
    kl_penalty_advantages,
    kl_sample_train,
    masked_mean,
)
from rlft.algos.kl_control import (
    AdaptiveKLController,
    FixedKLController,
    adaptive_kl_update,
    make_kl_controller,
)

__all__ = [
    "BASELINE_MODES",
    "AdaptiveKLController",
    "FixedKLController",
    "adaptive_kl_update",
    "constant_group_mask",
    "discounted_future_sum",
    "entropy_from_logp",
    "expand_group_mask",
    "get_baseline",
    "group_advantages",
    "k3_kl",
    "kl_penalty_advantages",
    "kl_sample_train",
    "make_kl_controller",
    "masked_mean",
    "register_baseline",
]
