"""Reward functions for RL fine-tuning: built-ins, spec resolution, and safe scoring.

Importing this package stays light (no torch/transformers/trl) because
``rlft validate-config`` resolves reward specs and must start fast.
"""

from rlft.rewards.builtin import (
    char_fraction,
    completion_text,
    exact_match,
    format_match,
    json_valid,
    length_penalty,
    numeric_match,
    regex_match,
)
from rlft.rewards.columns import required_columns, requires_columns
from rlft.rewards.registry import (
    BUILTIN_REWARDS,
    RewardResolveError,
    check_reward_spec,
    resolve_reward_fn,
    reward_short_name,
)
from rlft.rewards.safe import (
    RewardFailureError,
    RewardScores,
    RewardSuite,
    SafeReward,
    build_reward_suite,
)

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
    "regex_match",
    "required_columns",
    "requires_columns",
    "resolve_reward_fn",
    "reward_short_name",
]
