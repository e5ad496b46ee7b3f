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
    KL_PENALTIES,
    k3_kl,
    kl_penalty_advantages,
    kl_penalty_per_token,
    kl_sample_train,
    masked_mean,
)
from rlft.algos.kl_control import (
    AdaptiveKLController,
    FixedKLController,
    adaptive_kl_update,
    make_kl_controller,
)
from rlft.algos.ppo import (
    clipped_surrogate,
    clipped_value_loss,
    entropy_from_logits,
    explained_variance,
    gae,
    last_token_index,
    masked_var,
    masked_whiten,
    ppo_loss,
    shape_rewards,
)

__all__ = [
    "BASELINE_MODES",
    "KL_PENALTIES",
    "clipped_surrogate",
    "clipped_value_loss",
    "entropy_from_logits",
    "explained_variance",
    "gae",
    "kl_penalty_per_token",
    "last_token_index",
    "masked_var",
    "masked_whiten",
    "ppo_loss",
    "shape_rewards",
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
