"""ORPO: preference tuning with an odds-ratio term on the SFT loss and no reference model, through TRL's
experimental ORPOTrainer."""

from __future__ import annotations

from typing import Optional

from rlft.config.fields import F, config_section
from rlft.config.preference_lengths import explain
from rlft.config.stagespec import NO_REFERENCE, PREFERENCE_COLUMNS, PREFERENCE_METRICS, TRAIN_METRICS, \
    DataLengths, MemoryProfile, Reference, StageSpec, preference_profile
from rlft.config.stagespec import Doc, NATS_TOKEN, ONE


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


# this stage's own (meaning, unit) of shared metric names (rlft/config/metric_docs.py has the rest)
METRIC_MEANINGS: dict[str, Doc] = {
    "loss": ("TRL's ORPO loss: nll_loss − β·mean log σ(log odds of chosen over rejected)", NATS_TOKEN),
    "rewards/chosen": ("TRL: β × the chosen answers' mean per-token log-probability under the policy",
                       NATS_TOKEN + " × β"),
    "rewards/rejected": ("TRL: β × the rejected answers' mean per-token log-probability under the policy",
                         NATS_TOKEN + " × β"),
    "rewards/margins": ("TRL: mean of chosen minus rejected reward per pair", NATS_TOKEN + " × β"),
    "logps/chosen": ("TRL: the chosen answers' log-probability per answer token, averaged over pairs",
                     NATS_TOKEN),
    "logps/rejected": ("TRL: the rejected answers' log-probability per answer token, averaged over pairs",
                       NATS_TOKEN),
    "logits/chosen": ("TRL: the policy's logits averaged over the vocabulary and every position of the chosen "
                      "sequences (prompt and padding included)", "logit units"),
    "logits/rejected": ("TRL: the policy's logits averaged over the vocabulary and every position of the "
                        "rejected sequences (prompt and padding included)", "logit units"),
    "log_odds_ratio": ("TRL: mean log σ(log odds of chosen over rejected), the term ORPO maximises (≤ 0; 0 = "
                       "chosen certain)", ONE),
    "log_odds_chosen": ("TRL: mean log odds ratio log(odds(y_w) / odds(y_l)), odds from the per-token "
                        "log-probabilities (> 0: chosen preferred)", ONE),
    "nll_loss": ("TRL: cross-entropy of the chosen sequences over prompt and answer tokens (ORPO's SFT term)",
                 NATS_TOKEN),
}

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
    metric_meanings=METRIC_MEANINGS,
)
