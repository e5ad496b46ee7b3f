"""DPO: preference tuning on (prompt, chosen, rejected) pairs against a frozen reference, through TRL's
DPOTrainer."""

from __future__ import annotations

from typing import Optional

from rlft.config.fields import F, config_section
from rlft.config.preference_lengths import explain
from rlft.config.stagespec import PREFERENCE_COLUMNS, PREFERENCE_METRICS, TRAIN_METRICS, DataLengths, MemoryProfile, \
    StageChecks, StageSpec, is_number, preference_profile, reference_held
from rlft.config.stagespec import Doc, ONE


@config_section
class DPOConfig:
    """`dpo:` direct preference optimization."""
    beta: float = F(0.1, "Preference strength / implicit KL coefficient (0.01-0.5).", gt=0, le=5)
    label_smoothing: float = F(0.0, "Conservative-DPO label smoothing (0, or 0.1 when overfitting); the label-flip "
                                    "probability with loss_type robust.", ge=0, lt=0.5)
    max_length: int = F(4096, "Longest prompt + answer in tokens (capped by train.max_seq_length).", ge=8)
    max_prompt_length: int = F(2048, "Longest prompt in tokens; longer prompts keep their last tokens.", ge=1)
    eval_max_new_tokens: Optional[int] = F(None, "Longest answer the reward eval samples, in tokens "
                                                 "(eval.max_new_tokens, when set, wins); null = the longest chosen "
                                                 "answer in the data, at most max_length.", ge=1)
    loss_type: str = F("sigmoid", "DPO loss variant (TRL "
                                  "`loss_type`).", choices=["sigmoid", "hinge", "ipo", "robust", "bco_pair",
                                                            "sppo_hard", "nca_pair", "apo_zero", "apo_down"])


def checks(c: StageChecks) -> None:
    ls, lt = c.get("dpo.label_smoothing"), c.get("dpo.loss_type")
    if is_number(ls) and ls > 0 and lt not in ("sigmoid", "robust"):
        c.error("dpo.label_smoothing", f"label smoothing acts only on the `sigmoid` (conservative DPO) and `robust` "
                f"losses; TRL ignores it for `{lt}`. Set dpo.label_smoothing=0 or dpo.loss_type to sigmoid or robust")
    if c.get("model.ref") in (None, "none", ""):
        c.warning("model.ref", "DPO always measures against a reference; with no model.ref it uses the base model "
                  "(as `base`: the model without the adapter)")


def model_card(cfg) -> list[str]:
    return [f"- DPO: beta {cfg.dpo.beta:g}"]


def memory(cfg, world: int, data: DataLengths | None = None) -> MemoryProfile:
    """TRL's DPOTrainer: fused LM head; the reference is always measured against (a frozen copy under full
    fine-tuning)."""
    return preference_profile(cfg, "dpo", reference_held(cfg, True, "", full_copy=True), data=data)


# this stage's own (meaning, unit) of shared metric names (rlft/config/metric_docs.py has the rest)
METRIC_MEANINGS: dict[str, Doc] = {
    "loss": ("TRL's DPO loss (`dpo.loss_type`; sigmoid: −log σ(β·margin)), mean over pairs", ONE),
}

SPEC = StageSpec(
    name="dpo", section="dpo", runner="rlft.stages.dpo.runner:run", order=3,
    section_cls=DPOConfig, section_help="DPO stage.", section_order=1,
    trl_config="trl.trainer.dpo_config:DPOConfig",
    trl_modeled=(("beta", "dpo.beta"), ("label_smoothing", "dpo.label_smoothing"),
                 ("max_length", "dpo.max_length"), ("loss_type", "dpo.loss_type")),
    data_columns=PREFERENCE_COLUMNS, uses_reference=True,
    metrics=(*PREFERENCE_METRICS, "entropy", "mean_token_accuracy", "num_tokens", *TRAIN_METRICS),
    console=("loss", "rewards/accuracies", "rewards/margins"),
    checks=checks, explain=explain, model_card=model_card, memory=memory,
    report_note="DPO trains on fixed preference pairs and samples no completions, so there is nothing to compare here.",
    metric_meanings=METRIC_MEANINGS,
)
