"""Reward functions for RL fine-tuning: built-ins, spec resolution, and safe scoring.

Importing this package stays light (no torch/transformers/trl) because
``rlft validate-config`` resolves reward specs and must start fast; the names below load on
first use, so checking a reward spec does not load the scoring machinery (``safe``).
"""

from __future__ import annotations

from rlft.lazy import lazy_attributes

_WHERE = {
    **dict.fromkeys(("char_fraction", "completion_text", "exact_match", "format_match", "json_valid",
                     "length_penalty", "numeric_match", "overlong_penalty", "regex_match", "soft_overlong"),
                    "builtin"),
    **dict.fromkeys(("required_columns", "requires_columns"), "columns"),
    **dict.fromkeys(("BUILTIN_REWARDS", "RewardResolveError", "check_reward_spec", "resolve_reward_fn",
                     "reward_short_name"), "registry"),
    **dict.fromkeys(("RewardFailureError", "RewardScores", "RewardSuite", "SafeReward", "build_reward_suite"), "safe"),
}

__getattr__ = lazy_attributes(__name__, _WHERE)

__all__ = [
    "BUILTIN_REWARDS",
    "RewardFailureError",
    "RewardResolveError",
    "RewardScores",
    "RewardSuite",
    "SafeReward",
    "build_reward_suite",
    "char_fraction",
    "check_reward_spec",
    "completion_text",
    "exact_match",
    "format_match",
    "json_valid",
    "length_penalty",
    "numeric_match",
    "overlong_penalty",
    "regex_match",
    "required_columns",
    "requires_columns",
    "resolve_reward_fn",
    "reward_short_name",
    "soft_overlong",
]
