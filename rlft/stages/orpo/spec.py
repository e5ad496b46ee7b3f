"""ORPO: preference tuning with an odds-ratio term on the SFT loss and no reference model, through TRL's
experimental ORPOTrainer."""

from __future__ import annotations

from typing import Optional

from rlft.config.fields import F, config_section
from rlft.config.preference_lengths import explain
from rlft.config.stagespec import NO_REFERENCE, PREFERENCE_COLUMNS, PREFERENCE_METRICS, TRAIN_METRICS, \
    DataLengths, MemoryProfile, Reference, StageSpec, preference_profile


@config_section
class ORPOConfig:
    """`orpo:` odds-ratio preference optimization."""
    beta: float = F(0.1, "Odds-ratio weight (0.05-0.2).", gt=0, le=5)
    max_length: int = F(4096, "Longest prompt + answer in tokens (capped by train.max_seq_length).", ge=8)
    max_prompt_length: int = F(2048, "Longest prompt in tokens; longer prompts keep their last tokens.", ge=1)
    eval_max_new_tokens: Optional[int] = F(None, "Longest answer the reward eval samples, in tokens "
                                                 "(eval.max_new_tokens, when set, wins); null = the longest chosen "
                                                 "answer in the data, at most max_length.", ge=1)


def model_card(cfg) -> list[str]:
    return [f"- ORPO: beta {cfg.orpo.beta:g}"]


def memory(cfg, world: int, data: DataLengths | None = None) -> MemoryProfile:
    """TRL's ORPOTrainer: whole logits (no fused LM head), and no reference model."""
    return preference_profile(cfg, "orpo", Reference(NO_REFERENCE, "orpo uses no reference here"), full_logits=True,
                              data=data)


SPEC = StageSpec(
    name="orpo", section="orpo", runner="rlft.stages.orpo.runner:run", order=4,
    section_cls=ORPOConfig, section_help="ORPO stage.", section_order=2,
    trl_config="trl.experimental.orpo.orpo_config:ORPOConfig",
    trl_modeled=(("beta", "orpo.beta"), ("max_length", "orpo.max_length")),  # max_prompt_length: rlft's own
    data_columns=PREFERENCE_COLUMNS,
    metrics=(*PREFERENCE_METRICS, "log_odds_ratio", "log_odds_chosen", "nll_loss", *TRAIN_METRICS),
    console=("loss", "rewards/accuracies", "log_odds_ratio"),
    experimental=True,  # wraps trl.experimental
    explain=explain, model_card=model_card, memory=memory,
    report_note="ORPO trains on fixed preference pairs and samples no completions, so there is nothing to compare "
                "here.",
)
