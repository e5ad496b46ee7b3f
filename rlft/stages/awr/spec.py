"""AWR: advantage-weighted regression: sample, weight every sample by exp(beta x advantage) (clipped), SFT
with those weights, in rounds; the loop is shared with RS-SFT (rlft.stages.common.sampled_sft)."""

from __future__ import annotations


from rlft.config.fields import F, config_section, max_tokens_field, temperature_field, top_p_field
from rlft.config.names import AWR_BASELINES
from rlft.config.stagespec import (BASE_HEALTH, SAMPLED_SFT_METRICS, SFT_TRL_CONFIG, SFT_TRL_MODELED, TRAIN_METRICS,
                                   StageChecks, StageSpec, sample_then_sft_profile, sft_trl_checks)
from rlft.config.stagespec import Doc, REWARD, NATS_TOKEN


@config_section
class AWRConfig:
    """`awr:` advantage-weighted regression's rounds, sampling and weights."""
    advantage_beta: float = F(5.0, "Weight sharpness beta in w = min(exp(beta * advantage), clip_advantage): larger = "
                                   "stronger weighting (1-3 weak, 5-10 strong); beta is 1/tau of Peng et al.'s exp(A / "
                                   "tau).", gt=0, le=100)
    normalize_advantage: bool = F(True, "Normalise advantages to mean 0, std 1 over the whole sampled set before "
                                        "weighting.")
    clip_advantage: float = F(10.0, "Maximum weight of one sample (weights above are clipped to it).", gt=0)
    baseline: str = F("group_mean", "Advantage baseline: `group_mean` (mean total of the same prompt's samples) or "
                                    "`global_mean` (mean of all samples).", choices=list(AWR_BASELINES))
    num_samples_per_prompt: int = F(8, "Completions sampled per prompt of data.train.", ge=1, le=256)
    temperature: float = temperature_field(0.8)
    top_p: float = top_p_field()
    max_tokens: int = max_tokens_field()
    rounds: int = F(1, "Sample -> weight -> train rounds, each sampling from the policy the previous round "
                       "trained.", ge=1, le=100)
    generation_batch_size: int = F(64, "Completions per generate call (whole prompts); each call's samples reach "
                                       "samples.jsonl before the next, so a resumed run re-samples at most one "
                                       "call.", ge=1)


def checks(c: StageChecks) -> None:
    if c.get("awr.baseline") == "group_mean" and c.get("awr.num_samples_per_prompt") == 1:
        c.error("awr.num_samples_per_prompt", "1 sample per prompt with awr.baseline group_mean gives every advantage "
                                              "0 "
                "(each sample is its own group's mean): no learning signal. Sample 2 or more per prompt, or set "
                "awr.baseline=global_mean")


def explain(cfg) -> list[str]:
    from rlft.config.render import sampled_sft_schedule

    a = cfg.awr
    return [sampled_sft_schedule(cfg, f"weighs every scored sample by min(exp({a.advantage_beta} x normalised "
                                      f"advantage), {a.clip_advantage})")]


# this stage's own (meaning, unit) of shared metric names (rlft/config/metric_docs.py has the rest)
METRIC_MEANINGS: dict[str, Doc] = {
    "loss": ("weighted NLL −Σ w·log π(token) over completion tokens / the step's completion tokens (weights not "
             "renormalised)", NATS_TOKEN),
    "advantage_mean": ("mean advantage of the round's scored samples: total reward − `awr.baseline`, before "
                       "normalisation", REWARD),
}

SPEC = StageSpec(
    name="awr", section="awr", runner="rlft.stages.awr.runner:run", order=6,
    section_cls=AWRConfig, section_help="Advantage-weighted regression stage.", section_order=4,
    trl_config=SFT_TRL_CONFIG, trl_modeled=SFT_TRL_MODELED, trl_checks=sft_trl_checks, samples=True,
    metrics=(*SAMPLED_SFT_METRICS, "loss", "weight_mean", "weight_max",
             "frac_clipped", "ess", "advantage_mean", "advantage_std", "nll", "entropy", *TRAIN_METRICS),
    console=("round", "sampled_reward_mean", "ess", "loss"),
    health_rules=(*BASE_HEALTH, "awr_ess", "truncated"),
    resume_breaking=("awr.num_samples_per_prompt", "awr.rounds"),
    checks=checks, explain=explain, memory=sample_then_sft_profile,
    metric_meanings=METRIC_MEANINGS,
)
