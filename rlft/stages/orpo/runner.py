"""ORPO recipe [experimental]: causal LM, LoRA, prompt/chosen/rejected pairs, TRL's experimental
ORPOTrainer (through rlft.trainers.orpo_compat) + rlft's run lifecycle.

Its parts of the run lifecycle (rlft.stages.common.preference.PreferenceStage, run in order by rlft.runtime.lifecycle):
inputs (data, TRL settings, rewards, tokenizer and chat template, checked before anything is written) -> model ->
run folder -> trainer -> eval.start -> train (final adapter) -> eval.end. ORPO needs no reference model: `model.ref` is
not used.
"""

from __future__ import annotations

from rlft.config.compose import Composed
from rlft.config.schema import RlftConfig
from rlft.rundir.options import RunOptions


def orpo_trl_config(cfg: RlftConfig, output_dir: str, composed: Composed | None = None):
    """The one place rlft keys become TRL's ORPOConfig; `trl:` passthrough options go last.

    `orpo.max_prompt_length` has no TRL 1.16 field: RlftORPOTrainer applies it (see
    rlft.trainers.orpo_compat).
    """
    from rlft.stages.common.preference import eval_args, max_length
    from rlft.stages.common.trl_config import build_trl_config
    from rlft.trainers.orpo_compat import ORPOConfig

    o = cfg.orpo
    # TRL's ORPO collator needs the raw columns; it would switch this off itself, with a warning
    args = dict(beta=o.beta, max_length=max_length(cfg, o.max_length), remove_unused_columns=False)
    args.update(eval_args(cfg))
    args.update(cfg.trl)
    return build_trl_config(ORPOConfig, cfg, output_dir, args, composed)


def run(cfg: RlftConfig, composed: Composed, opts: RunOptions) -> int:
    from rlft.stages.common.preference import run_preference

    def make_trainer(model, tokenizer, _ref, args, train_ds, eval_ds, ctx):
        from rlft.models.loading import lora_config
        from rlft.trainers.orpo_compat import RlftORPOTrainer

        return RlftORPOTrainer(model=model, args=args, train_dataset=train_ds, eval_dataset=eval_ds,
                               processing_class=tokenizer, peft_config=lora_config(cfg, model),
                               callbacks=ctx.callbacks, max_prompt_length=cfg.orpo.max_prompt_length)

    return run_preference(cfg, composed, opts, orpo_trl_config, make_trainer)
