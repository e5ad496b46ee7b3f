"""Pure tensor math for RL fine-tuning: advantages, KL penalties, KL control, AWR weights, the RS-SFT keep rule,
and the registries of the pluggable pieces (advantage estimators, policy losses, KL estimators, GRPO baselines).

Names load their module on first use, so `rlft.algos.schedule` (plain arithmetic) and `rlft.algos.registry`
import without torch."""

from rlft.lazy import lazy_attributes

_MODULES = {
    "advantages": ("BASELINES", "BASELINE_MODES", "constant_group_mask", "discounted_returns",
                   "episode_group_advantages", "expand_group_mask", "get_baseline", "group_advantages",
                   "register_baseline"),
    "awr": ("AWR_BASELINES", "awr_advantages", "awr_metrics", "awr_weights", "effective_sample_size",
            "fraction_clipped", "normalize_advantages", "weighted_nll"),
    "dynamic": ("pick_groups",),
    "estimators": ("episode_return_advantages", "gae_advantages"),
    "kl": ("KL_ESTIMATORS", "KL_PENALTIES", "approx_kl", "discounted_future_sum", "entropy_from_logp", "k3_kl",
           "kl_penalty_advantages", "kl_penalty_per_token", "kl_sample_train", "masked_mean"),
    "kl_control": ("AdaptiveKLController", "FixedKLController", "adaptive_kl_update", "default_horizon",
                   "make_kl_controller"),
    "loop_state": ("LoopState",),
    "offpolicy": ("behaviour_weights",),
    "policy_loss": ("IS_LEVELS", "LOSS_AGGREGATIONS", "LossSettings", "POLICY_LOSSES", "PolicyLoss", "aggregate_loss",
                    "cispo", "clipped_surrogate", "grpo_policy_loss", "importance_sampling", "log_importance_weights",
                    "loss_settings", "register_policy_loss"),
    "ppo": ("ADVANTAGE_NORMS", "clipped_value_loss", "entropy_from_logits", "explained_variance", "gae",
            "last_token_index",
            "masked_moments", "masked_var", "masked_whiten", "moments_mean_var", "normalize_gae_advantages",
            "ppo_loss", "return_scale", "shape_rewards", "value_bias_from_returns"),
    "registry": ("Registry",),
    "rejection": ("KEEP_RULES", "keep_mask"),
    "schedule": ("LoopSchedule", "episode_grpo_loop_schedule", "ppo_loop_schedule"),
    "tis": ("tis_metrics", "tis_weights"),
}

__getattr__ = lazy_attributes(__name__, {name: module for module, names in _MODULES.items() for name in names})

__all__ = sorted(name for names in _MODULES.values() for name in names)
