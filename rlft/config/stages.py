"""One `StageSpec` per stage: everything rlft knows about a stage, in one table.

Plain data only (strings and tuples, standard library), so the lowest layer (`rlft.config`) can
read it and `validate-config` stays free of torch/TRL. The layers above look a stage up here
instead of keeping their own stage-keyed tables:

- `rlft.stages.get_runner` imports `runner`;
- `rlft.config.validate` reads `section`, `samples`, `data_columns`;
- `rlft.config.trl_fields` reads `trl_config` and `trl_modeled`;
- `rlft.monitor.metrics` / `rlft.monitor.console` read `metrics` / `console`;
- `rlft.monitor.health` runs the rules named in `health_rules`;
- `rlft.runtime` refuses a resume when a `resume_breaking` key changed.

Adding a stage = one spec here + one runner module (`rlft/stages/<name>.py`) + one profile
(`rlft/configs/stages/<name>.yaml`) + tests.
"""

from __future__ import annotations

from dataclasses import dataclass

# Health rules every training stage gets (names of rules in rlft.monitor.health.RULES).
BASE_HEALTH = ("loss_nan", "grad_norm")


@dataclass(frozen=True)
class StageSpec:
    name: str                               # `--stage` value and the profile `configs/stages/<name>.yaml`
    section: str | None                     # its config section (`grpo:`), None when it has none
    runner: str | None                      # "module:function" of `run(cfg, composed, opts)`; None = not built yet
    trl_config: str | None = None           # "module:Class" of the TRL config it builds, None = rlft's own trainer
    trl_modeled: tuple[tuple[str, str], ...] = ()  # (TRL option, rlft key that sets it) beyond the common train.* ones
    data_columns: tuple[str, ...] = ("data.prompt_column",)  # config keys naming the columns data.train must have
    samples: bool = False                   # generates and scores completions (needs `rewards:`, writes completions.jsonl)
    metrics: tuple[str, ...] = ()           # keys every metrics.jsonl row carries (null when not measured that step)
    console: tuple[str, ...] = ("loss",)    # headline metrics on the console line
    health_rules: tuple[str, ...] = BASE_HEALTH  # rules of rlft.monitor.health.RULES checked on each record
    resume_breaking: tuple[str, ...] = ()   # stage keys whose change makes its checkpoints meaningless
    experimental: bool = False              # wraps an experimental upstream API

    @property
    def built(self) -> bool:
        return self.runner is not None

    def modeled(self) -> dict[str, str]:
        return dict(self.trl_modeled)


_TRAIN_METRICS = ("grad_norm", "learning_rate")
_PREFERENCE_METRICS = ("loss", "rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins")
_PREFERENCE_COLUMNS = ("data.prompt_column", "data.chosen_column", "data.rejected_column")

SPECS: dict[str, StageSpec] = {s.name: s for s in (
    StageSpec(
        name="grpo", section="grpo", runner="rlft.stages.grpo.runner:run",
        trl_config="trl.trainer.grpo_config:GRPOConfig",
        trl_modeled=(("num_generations", "grpo.group_size"), ("temperature", "grpo.temperature"),
                     ("top_p", "grpo.top_p"), ("max_completion_length", "grpo.max_tokens"),
                     ("beta", "grpo.kl_penalty_coef"), ("epsilon", "grpo.clip_range"),
                     ("num_iterations", "grpo.ppo_epochs"), ("steps_per_generation", "grpo.num_substeps"),
                     ("scale_rewards", "grpo.baseline_mode"), ("reward_weights", "rewards[].weight")),
        samples=True,
        metrics=("reward", "reward_std", "frac_constant_groups", "kl_sample_train_v1", "kl_sample_train_v2",
                 "kl_policy_ref", "kl_coef", "entropy", "completion_length", *_TRAIN_METRICS),
        console=("reward", "kl_policy_ref", "entropy", "completion_length", "loss"),
        health_rules=(*BASE_HEALTH, "kl_policy_ref", "entropy_collapse", "all_groups_constant",
                      "sampler_learner_mismatch"),
        resume_breaking=("grpo.group_size", "grpo.batch_size", "grpo.num_substeps"),
    ),
    StageSpec(
        name="dpo", section="dpo", runner="rlft.stages.dpo.runner:run",
        trl_config="trl.trainer.dpo_config:DPOConfig",
        trl_modeled=(("beta", "dpo.beta"), ("label_smoothing", "dpo.label_smoothing"),
                     ("max_length", "dpo.max_length"), ("loss_type", "dpo.loss_type")),
        data_columns=_PREFERENCE_COLUMNS,
        metrics=(*_PREFERENCE_METRICS, *_TRAIN_METRICS),
        console=("loss", "rewards/accuracies", "rewards/margins"),
    ),
    StageSpec(
        name="orpo", section="orpo", runner="rlft.stages.orpo.runner:run",
        trl_config="trl.experimental.orpo.orpo_config:ORPOConfig",
        trl_modeled=(("beta", "orpo.beta"), ("max_length", "orpo.max_length")),  # max_prompt_length: rlft's own
        data_columns=_PREFERENCE_COLUMNS,
        metrics=(*_PREFERENCE_METRICS, "log_odds_ratio", *_TRAIN_METRICS),
        console=("loss", "rewards/accuracies", "log_odds_ratio"),
        experimental=True,  # wraps trl.experimental
    ),
    StageSpec(
        name="rs_sft", section="rs_sft", runner="rlft.stages.rs_sft.runner:run",
        trl_config="trl.trainer.sft_config:SFTConfig",
        trl_modeled=(("max_length", "train.max_seq_length"),),
        samples=True,
        metrics=("round", "sampled_reward_mean", "sampled_reward_std", "kept_fraction", "kept_count", "loss",
                 *_TRAIN_METRICS),
        console=("round", "sampled_reward_mean", "kept_fraction", "loss"),
        resume_breaking=("rs_sft.num_samples_per_prompt", "rs_sft.rounds"),
    ),
    StageSpec(
        name="awr", section="awr", runner="rlft.stages.awr.runner:run",
        trl_config="trl.trainer.sft_config:SFTConfig",
        trl_modeled=(("max_length", "train.max_seq_length"),),
        samples=True,
        metrics=("round", "sampled_reward_mean", "sampled_reward_std", "loss", "weight_mean", "weight_max",
                 "frac_clipped", "ess", "advantage_mean", "advantage_std", *_TRAIN_METRICS),
        console=("round", "sampled_reward_mean", "ess", "loss"),
        health_rules=(*BASE_HEALTH, "awr_ess"),
        resume_breaking=("awr.num_samples_per_prompt", "awr.rounds"),
    ),
    # Not built yet: its spec keeps `validate-config` and `rlft list` working.
    StageSpec(
        name="ppo", section="ppo", runner="rlft.stages.ppo.runner:run",  # rlft's own trainer (TRL 1.x has none)
        data_columns=("data.prompt_column",),
        samples=True,
        metrics=("reward", "reward_std", "loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac",
                 "value_clipfrac", "explained_variance", "kl_policy_ref", "kl_coef", "advantage_mean", "return_mean",
                 "completion_length", "episodes", *_TRAIN_METRICS),
        console=("reward", "value_loss", "kl_policy_ref", "entropy", "clipfrac"),
        health_rules=(*BASE_HEALTH, "kl_policy_ref", "entropy_collapse"),
        resume_breaking=("ppo.batch_size", "ppo.mini_batch_size", "ppo.value_model"),
    ),
)}

# Display order of `--stage` choices (the guide's order: GRPO first, the preference stages, then the rest).
STAGES: tuple[str, ...] = ("grpo", "ppo", "dpo", "orpo", "rs_sft", "awr")
assert set(STAGES) == set(SPECS), "every stage needs a StageSpec"

# `--hw` choices: the profiles in configs/hw/ (kept here beside STAGES so `rlft --help` needs no schema)
HARDWARE: tuple[str, ...] = ("cpu", "mps", "rtx4090", "a100", "ddp", "fsdp")

# Sections that belong to one stage: setting one while training another stage has no effect.
STAGE_SECTIONS: dict[str, str] = {s.section: s.name for s in SPECS.values() if s.section}


def get_spec(stage: str) -> StageSpec:
    """The spec of `stage`; KeyError names the valid stages."""
    try:
        return SPECS[stage]
    except KeyError:
        raise KeyError(f"unknown stage `{stage}`; valid: {', '.join(STAGES)}") from None


def sampling_stages() -> tuple[str, ...]:
    return tuple(s for s in STAGES if SPECS[s].samples)
