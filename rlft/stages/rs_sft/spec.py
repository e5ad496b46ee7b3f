"""RS-SFT: rejection-sampling fine-tuning (expert iteration): sample, keep the best by reward, SFT on them,
in rounds; the loop is shared with AWR (rlft.stages.common.sampled_sft)."""

from __future__ import annotations


from rlft.config.fields import F, config_section, max_tokens_field, temperature_field, top_p_field
from rlft.config.names import KEEP_RULES
from rlft.config.stagespec import (BASE_HEALTH, SAMPLED_SFT_METRICS, SFT_TRL_CONFIG, SFT_TRL_MODELED, TRAIN_METRICS,
                                   StageSpec, sample_then_sft_profile, sft_trl_checks)
from rlft.config.stagespec import Doc, NATS_TOKEN


@config_section
class RSSFTConfig:
    """`rs_sft:` rejection-sampling SFT's rounds, sampling and keep rule."""
    num_samples_per_prompt: int = F(4, "Completions sampled per prompt of data.train in each round.", ge=1, le=256)
    keep: str = F("best", "Keep rule: `best` = each prompt's best sample if its total reward is above "
                          "reward_threshold; `above_threshold` = every sample above it.", choices=list(KEEP_RULES))
    reward_threshold: float = F(0.6, "Keep only samples whose total reward is strictly above this (reward units).")
    max_samples: int = F(20000, "Cap on kept samples per round, highest totals first (ties: earlier prompt, then "
                                "earlier sample).", ge=1)
    rounds: int = F(1, "Expert-iteration rounds: sample -> keep -> SFT, each round sampling from the policy the "
                       "previous one trained.", ge=1, le=100)
    temperature: float = temperature_field(0.8)
    top_p: float = top_p_field(0.9)
    max_tokens: int = max_tokens_field()
    generation_batch_size: int = F(64, "Completions per generate call (whole prompts); each call's samples reach "
                                       "samples.jsonl before the next, so a resumed run re-samples at most one "
                                       "call.", ge=1)


def explain(cfg) -> list[str]:
    from rlft.config.render import sampled_sft_schedule

    s = cfg.rs_sft
    what = ("keeps " + ("each prompt's best sample" if s.keep == "best" else "every sample")
            + f" with total reward > {s.reward_threshold} (at most {s.max_samples})")
    return [sampled_sft_schedule(cfg, what)]


# this stage's own (meaning, unit) of shared metric names (rlft/config/metric_docs.py has the rest)
METRIC_MEANINGS: dict[str, Doc] = {
    "loss": ("TRL's SFT loss: negative log-likelihood of the kept completions' tokens (prompt masked)",
             NATS_TOKEN),
}

SPEC = StageSpec(
    name="rs_sft", section="rs_sft", runner="rlft.stages.rs_sft.runner:run", order=5,
    section_cls=RSSFTConfig, section_help="Rejection-sampling SFT stage.", section_order=3,
    trl_config=SFT_TRL_CONFIG, trl_modeled=SFT_TRL_MODELED, trl_checks=sft_trl_checks, samples=True,
    metrics=(*SAMPLED_SFT_METRICS, "kept_fraction", "kept_count", "kept_reward_mean", "loss",
             "entropy", "mean_token_accuracy", "num_tokens", *TRAIN_METRICS),
    console=("round", "sampled_reward_mean", "kept_fraction", "loss"),
    health_rules=(*BASE_HEALTH, "truncated"),
    resume_breaking=("rs_sft.num_samples_per_prompt", "rs_sft.rounds"),
    explain=explain, memory=sample_then_sft_profile,
    metric_meanings=METRIC_MEANINGS,
)
