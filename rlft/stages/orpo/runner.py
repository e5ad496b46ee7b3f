"""ORPO recipe [experimental]: causal LM, LoRA, prompt/chosen/rejected pairs, TRL's experimental
ORPOTrainer (through rlft.trainers.orpo_compat) + rlft's run lifecycle.

Lifecycle, top to bottom: data and TRL settings (checked before anything is written) -> run folder -> model +
tokenizer -> TRL config -> train -> final adapter. ORPO needs no reference model: `model.ref` is
not used.
"""

from __future__ import annotations

from rlft.config.compose import Composed
from rlft.config.schema import RlftConfig
from rlft.run import RunOptions


def orpo_trl_config(cfg: RlftConfig, output_dir: str, composed: Composed | None = None):
    """The one place rlft keys become TRL's ORPOConfig; `trl:` passthrough options go last.

    `orpo.max_prompt_length` has no TRL 1.16 field: RlftORPOTrainer applies it (see
    rlft.trainers.orpo_compat).
    """
    from rlft.models.hardware import common_training_args
    from rlft.stages.preference import eval_args, max_length
    from rlft.stages.trl_config import build_trl_config
    from rlft.trainers.orpo_compat import ORPOConfig

    o = cfg.orpo
    args = common_training_args(cfg, output_dir)
    # TRL's ORPO collator needs the raw columns; it would switch this off itself, with a warning
    args.update(beta=o.beta, max_length=max_length(cfg, o.max_length), remove_unused_columns=False)
    args.update(eval_args(cfg))
    args.update(cfg.trl)
    return build_trl_config(ORPOConfig, args, cfg, composed)


def run(cfg: RlftConfig, composed: Composed, opts: RunOptions) -> int:
    from rlft.runtime import RunContext, quiet_libraries
    from rlft.stages.preference import apply_chat_template_setting, load_preference_data, print_start

    quiet_libraries(opts.verbose)
    train_ds, eval_ds = load_preference_data(cfg)  # before the run folder exists: fix the data, rerun as is
    orpo_trl_config(cfg, cfg.train.output_dir or ".", composed)  # likewise TRL's objections to the settings
    with RunContext(cfg, composed, opts) as ctx:
        from rlft.models.loading import load_model_and_tokenizer, lora_config
        from rlft.trainers.orpo_compat import RlftORPOTrainer

        model, tokenizer = load_model_and_tokenizer(cfg)
        (train_ds, eval_ds), chat_note = apply_chat_template_setting(cfg, [train_ds, eval_ds], tokenizer)
        ctx.open_run()
        args = orpo_trl_config(cfg, str(ctx.run.checkpoints), composed)
        print_start(cfg, len(train_ds), cfg.orpo.max_length, cfg.orpo.max_prompt_length, (chat_note,))
        trainer = RlftORPOTrainer(
            model=model,
            args=args,
            train_dataset=train_ds,
            eval_dataset=eval_ds,
            processing_class=tokenizer,
            peft_config=lora_config(cfg, model),
            callbacks=ctx.callbacks(),
            max_prompt_length=cfg.orpo.max_prompt_length,
        )
        return ctx.train(trainer, tokenizer)
