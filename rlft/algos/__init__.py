"""Pure tensor math for RL fine-tuning: advantages, KL penalties, KL control, AWR weights, the RS-SFT keep rule."""

from rlft.algos.advantages import (
    BASELINE_MODES,
    constant_group_mask,
    expand_group_mask,
    get_baseline,
    group_advantages,
    register_baseline,
)
from rlft.algos.awr import (
    AWR_BASELINES,
    awr_advantages,
    awr_metrics,
    awr_weights,
    effective_sample_size,
    fraction_clipped,
    normalize_advantages,
    weighted_nll,
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
from rlft.algos.rejection import KEEP_RULES, keep_mask

__all__ = [
    "AWR_BASELINES",
    "KEEP_RULES",
    "awr_advantages",
    "awr_metrics",
    "awr_weights",
    "effective_sample_size",
    "fraction_clipped",
    "keep_mask",
    "normalize_advantages",
    "weighted_nll",
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
