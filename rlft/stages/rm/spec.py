"""RM: a reward model (a sequence-classification head on the model) trained on (prompt, chosen, rejected) pairs
with the pairwise Bradley-Terry loss, through TRL's RewardTrainer. Its final/ is a merged
AutoModelForSequenceClassification folder that the `reward_model` reward (and anything outside rlft) loads."""

from __future__ import annotations

from rlft.config.fields import F, config_section
from rlft.config.stagespec import NO_REFERENCE, PREFERENCE_COLUMNS, TRAIN_METRICS, DataLengths, MemoryProfile, \
    Reference, StageChecks, StageSpec, halve_micro_batch
from rlft.config.stagespec import Doc, REWARD, TOKENS, FRACTION, ONE

# TRL's RewardTrainer logs these on training steps, and with an `eval_` prefix on held-out pairs
RM_METRICS = ("loss", "accuracy", "margin", "mean_reward", "min_reward", "max_reward", "num_tokens")


@config_section
class RMConfig:
    """`rm:` reward-model training."""
    max_length: int = F(1024, "Longest prompt + answer in tokens (capped by train.max_seq_length); TRL drops longer "
                              "pairs.", ge=8)
    center_rewards_coefficient: float = F(0.0, "Weight of the mean-zero penalty on the rewards (0 = off; 0.01 "
                                               "recommended by TRL), so scores centre near 0.", ge=0, le=1)


def checks(c: StageChecks) -> None:
    if c.get("data.train") == "demo":
        c.error("data.train", "stage rm needs preference pairs (prompt, chosen and rejected columns), e.g. "
                "configs/examples/data/pipeline_prefs.jsonl; `demo` has prompts only")


def model_card(cfg) -> list[str]:
    return ["- RM: a reward model (AutoModelForSequenceClassification, one score per sequence), trained on "
            "preference pairs with TRL's RewardTrainer; load it with `- fn: reward_model` and `kwargs: {path: ...}`"]


def memory(cfg, world: int, data: DataLengths | None = None) -> MemoryProfile:
    """TRL's RewardTrainer: a micro-batch of pairs is twice as many rows (chosen and rejected) of rm.max_length
    tokens (or the data's longest pair within it); one score per row, no vocabulary logits, no reference."""
    pairs = cfg.train.per_device_train_batch_size
    seq = min(cfg.rm.max_length, cfg.train.max_seq_length)
    if data is not None and data.answers:
        seq = data.pair(seq, seq)
    levers = [*halve_micro_batch(cfg, pairs)]
    if seq >= 16:
        levers.append(("halve the sequence length", {"rm.max_length": seq // 2}))
    return MemoryProfile(2 * pairs, seq, 1, reference=Reference(NO_REFERENCE, "a reward model has no reference"),
                         what=f"{pairs} pairs = {2 * pairs} rows (chosen + rejected) of {seq} tokens, one score each",
                         levers=tuple(levers))


# this stage's own (meaning, unit) of shared metric names (rlft/config/metric_docs.py has the rest)
# TRL's RewardTrainer (trl/trainer/reward_trainer.py); `eval_` + the name on held-out pairs
METRIC_MEANINGS: dict[str, Doc] = {
    "loss": ("TRL: Bradley-Terry loss −log σ(r_chosen − r_rejected), mean over the step's pairs (plus "
             "`rm.center_rewards_coefficient`·mean(r²) when set)", ONE),
    "accuracy": ("TRL: pairwise accuracy, share of the step's pairs whose chosen answer scores above the "
                 "rejected one", FRACTION),
    "margin": ("TRL: mean reward margin r_chosen − r_rejected over the step's pairs", REWARD),
    "mean_reward": ("TRL: mean score of the step's chosen and rejected answers", REWARD),
    "min_reward": ("TRL: lowest score among the step's answers", REWARD),
    "max_reward": ("TRL: highest score among the step's answers", REWARD),
    "num_tokens": ("TRL: tokens of the pairs trained on so far (all processes)", TOKENS),
}

SPEC = StageSpec(
    name="rm", section="rm", runner="rlft.stages.rm.runner:run", order=7,
    section_cls=RMConfig, section_help="Reward-model stage.", section_order=7,
    trl_config="trl.trainer.reward_config:RewardConfig",
    trl_modeled=(("max_length", "rm.max_length"), ("center_rewards_coefficient", "rm.center_rewards_coefficient")),
    data_columns=PREFERENCE_COLUMNS, trains_policy=False,
    metrics=(*RM_METRICS, *TRAIN_METRICS),
    console=("loss", "accuracy", "margin"),
    checks=checks, model_card=model_card, memory=memory,
    report_note="The RM stage trains a scorer on fixed preference pairs and samples no completions.",
    metric_meanings=METRIC_MEANINGS,
)
