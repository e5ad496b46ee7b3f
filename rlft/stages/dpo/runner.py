"""DPO recipe: causal LM, LoRA, prompt/chosen/rejected pairs, TRL's DPOTrainer + rlft's run lifecycle.

Its parts of the run lifecycle (rlft.stages.common.preference.PreferenceStage, run in order by rlft.runtime.lifecycle):
inputs (data, TRL settings, rewards, tokenizer and chat template, checked before anything is written) -> model +
reference -> run folder -> trainer -> eval.start -> train (final adapter) -> eval.end.

The reference is the frozen model DPO measures its implicit reward against. With LoRA and
`model.ref: base` (or null) TRL disables the adapter to get it, so no second model is loaded; with
`model.ref: PATH` that checkpoint (full model or adapter folder) is loaded and frozen.
"""

from __future__ import annotations

from rlft.config.compose import Composed
from rlft.config.schema import RlftConfig
from rlft.stages.dpo.spec import DPOConfig
from rlft.rundir.options import RunOptions


def dpo_loss_args(d: DPOConfig) -> dict:
    """`dpo.loss_type` and `dpo.label_smoothing` as TRL's loss settings.

    TRL 1.16 applies `label_smoothing` only to its `robust` (and `exo_pair`) losses; the sigmoid loss
    ignores it. rlft's label smoothing on the sigmoid loss is conservative DPO (cDPO), the loss
    -(1 - e) log s(x) - e log s(-x) with x = beta * margin. TRL's robust loss is
    (-(1 - e) log s(x) + e log s(-x)) / (1 - 2e), so cDPO is exactly the weighted sum
    2(1 - e) * sigmoid - (1 - 2e) * robust, which TRL computes through `loss_type` + `loss_weights`.
    Validation rejects label smoothing on the other loss types, which TRL would ignore.
    """
    e = d.label_smoothing
    if e > 0 and d.loss_type == "sigmoid":
        return dict(loss_type=["sigmoid", "robust"], loss_weights=[2 * (1 - e), -(1 - 2 * e)], label_smoothing=e)
    return dict(loss_type=[d.loss_type], label_smoothing=e)


def dpo_trl_config(cfg: RlftConfig, output_dir: str, composed: Composed | None = None):
    """The one place rlft keys become a trl.DPOConfig; `trl:` passthrough options go last.

    `dpo.max_prompt_length` has no TRL 1.16 field: RlftDPOTrainer applies it (see rlft.trainers.dpo).
    """
    from trl import DPOConfig as TRLDPOConfig

    from rlft.stages.common.preference import eval_args, max_length
    from rlft.stages.common.trl_config import build_trl_config

    d = cfg.dpo
    args = dict(beta=d.beta, max_length=max_length(cfg, d.max_length), **dpo_loss_args(d))
    args.update(eval_args(cfg))
    args.update(cfg.trl)
    return build_trl_config(TRLDPOConfig, cfg, output_dir, args, composed)


def run(cfg: RlftConfig, composed: Composed, opts: RunOptions) -> int:
    from rlft.stages.common.preference import run_preference

    def make_trainer(model, tokenizer, ref, args, train_ds, eval_ds, ctx):
        from rlft.models.loading import lora_config
        from rlft.trainers.dpo import RlftDPOTrainer

        # ref None (`base`): TRL uses the model with the adapter disabled
        return RlftDPOTrainer(model=model, ref_model=ref, args=args, train_dataset=train_ds, eval_dataset=eval_ds,
                              processing_class=tokenizer, peft_config=lora_config(cfg, model),
                              callbacks=ctx.callbacks, max_prompt_length=cfg.dpo.max_prompt_length)

    from rlft.models.loading import load_reference

    return run_preference(cfg, composed, opts, dpo_trl_config, make_trainer, load_reference)
