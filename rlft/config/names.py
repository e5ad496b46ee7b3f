"""Names of rlft's built-in registries whose code imports torch (`rlft.algos`) or is no part of the config
layer (`rlft.data`, `rlft.envs`), importable without either: the schema's allowed values and `validate-config`'s
did-you-mean read them here. tests/test_registry_names.py holds each tuple equal to its registry."""

from __future__ import annotations

GRPO_BASELINES = ("group_mean", "group_mean_std", "group_mean_batch_std", "global_mean",  # rlft.algos.advantages
                  "leave_one_out")
AWR_BASELINES = ("group_mean", "global_mean")                                       # rlft.algos.awr
KL_PENALTIES = ("kl", "abs", "mse", "full")                                         # rlft.algos.kl
KEEP_RULES = ("best", "above_threshold")                                            # rlft.algos.rejection
TOO_LONG_MODES = ("truncate", "drop", "error")                                      # rlft.data.checks
POLICY_LOSSES = ("importance_sampling", "ppo", "cispo")                             # rlft.algos.policy_loss
CLIPPED_POLICY_LOSSES = ("ppo", "cispo")                                            # those with clipped=True
LOSS_AGGREGATIONS = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm")  # rlft.algos.policy_loss
IS_LEVELS = ("token", "sequence")                                                   # rlft.algos.policy_loss
ENVS = ("toolsim",)                                                                 # rlft.envs.registry
