"""GRPO recipe: tiny-to-large causal LM, LoRA, reward functions, TRL's GRPOTrainer + rlft's hooks.

Lifecycle, top to bottom: run folder -> model + tokenizer -> data -> rewards -> TRL config -> train
-> final adapter.
"""

from __future__ import annotations

from rlft.config.compose import Composed
from rlft.config.schema import RlftConfig
from rlft.data.prompts import PROMPT_ID
from rlft.run import RunError, RunOptions


def grpo_batch_layout(cfg: RlftConfig, num_processes: int) -> dict:
    """rlft's batch_size / group_size / num_substeps as TRL's micro-batch, accumulation and
    steps_per_generation: one generation of batch_size x group_size completions, split into
    num_substeps optimizer steps, each accumulated over micro-batches of at most
    train.per_device_train_batch_size completions per process."""
    g = cfg.grpo
    total = g.batch_size * g.group_size
    per_substep = total // g.num_substeps
    if per_substep % num_processes:
        raise RunError(f"grpo.batch_size x grpo.group_size / grpo.num_substeps = {per_substep} completions per "
                       f"optimizer step cannot be split over {num_processes} processes")
    per_process = per_substep // num_processes
    micro = max(d for d in range(1, min(cfg.train.per_device_train_batch_size, per_process) + 1) if per_process % d == 0)
    accum = per_process // micro
    return dict(per_device_train_batch_size=micro, gradient_accumulation_steps=accum,
                steps_per_generation=g.num_substeps * accum, num_generations=g.group_size)


def grpo_trl_config(cfg: RlftConfig, output_dir: str, num_processes: int = 1, composed: Composed | None = None):
    """The one place rlft keys become a trl.GRPOConfig; `trl:` passthrough options go last."""
    from trl import GRPOConfig

    from rlft.models.hardware import common_training_args
    from rlft.stages.trl_config import build_trl_config

    g = cfg.grpo
    args = common_training_args(cfg, output_dir)
    args.update(grpo_batch_layout(cfg, num_processes))
    args.update(
        num_iterations=g.ppo_epochs,
        temperature=g.temperature,
        top_p=g.top_p,
        max_completion_length=g.max_tokens,
        beta=g.kl_penalty_coef if g.kl_penalty_mode == "loss" else 0.0,
        scale_rewards="group" if g.baseline_mode == "group_mean_std" else "none",  # only TRL's own logging
        shuffle_dataset=True,
        log_completions=False,
        reward_weights=[r.weight for r in cfg.rewards],
    )
    if g.loss_fn == "ppo":
        args.update(epsilon=g.clip_range)
    else:  # plain importance sampling: ratio * advantage, never clipped
        args.update(epsilon=1.0, epsilon_high=1e9)
    args.update(cfg.trl)
    return build_trl_config(GRPOConfig, args, cfg, composed)


def load_prompt_dataset(cfg: RlftConfig):
    from datasets import Dataset

    if cfg.data.train == "demo":
        from rlft.demo import demo_prompts

        ds = Dataset.from_list(demo_prompts())
    else:
        from rlft.data import DataError
        from rlft.data.load import load_table, prepare_prompt_dataset

        try:
            ds = prepare_prompt_dataset(load_table(cfg.data.train), cfg.data.prompt_column,
                                        system_prompt=cfg.data.system_prompt, source="data.train")
        except DataError as exc:
            raise RunError(str(exc)) from None
    if cfg.data.max_samples:
        ds = ds.select(range(min(cfg.data.max_samples, len(ds))))
    return ds.add_column(PROMPT_ID, list(range(len(ds))))


def apply_chat_template_setting(cfg: RlftConfig, ds, tokenizer):
    """(dataset, start-line phrase): plain-text prompts become user messages when the template applies,
    so TRL renders them with the tokenizer's chat template."""
    from rlft.data import DataError
    from rlft.data.chat import decide, describe, prompt_messages

    has = bool(getattr(tokenizer, "chat_template", None))
    try:
        on = decide(cfg.data.chat_template, has, cfg.model.name_or_path)
    except DataError as exc:
        raise RunError(str(exc)) from None
    kind = "text" if isinstance(ds[0]["prompt"], str) else "chat"
    if on and kind == "text":
        ds = ds.map(lambda row: {"prompt": prompt_messages(row["prompt"])}, desc="Chat messages")
    return ds, describe(cfg.data.chat_template, has, on, kind)


TRL_EXTRA_KWARGS = {"trainer_state", "log_extra", "log_metric", "environments", "completion_ids", PROMPT_ID}


def trl_reward_funcs(suite):
    """One TRL reward callable per rlft reward; failures become None (TRL's 'no score')."""
    from rlft.trainers.grpo import _text

    funcs = []
    for safe in suite.rewards:
        def fn(prompts, completions, _safe=safe, **kwargs):
            columns = {k: v for k, v in kwargs.items() if k not in TRL_EXTRA_KWARGS}
            return _safe([_text(p) for p in prompts], [_text(c) for c in completions], **columns)
        fn.__name__ = safe.name
        funcs.append(fn)
    return funcs


def run(cfg: RlftConfig, composed: Composed, opts: RunOptions) -> int:
    import os
    import sys

    from rlft.runtime import RunContext, quiet_libraries

    quiet_libraries(opts.verbose)
    # TRL's objections to the settings, before the run folder exists: fix the config, rerun as is
    grpo_trl_config(cfg, cfg.train.output_dir or ".", int(os.environ.get("WORLD_SIZE", "1")), composed)
    with RunContext(cfg, composed, opts) as ctx:
        from rlft.models.loading import load_model_and_tokenizer, load_reference, lora_config
        from rlft.rewards import RewardResolveError, build_reward_suite
        from rlft.trainers.grpo import GRPOHooks, RlftGRPOTrainer

        dataset = load_prompt_dataset(cfg)  # data, rewards, model: all before the run folder exists
        try:
            suite = build_reward_suite([vars(r) for r in cfg.rewards],
                                       max_failure_fraction=cfg.monitor.max_reward_failure_fraction)
        except (RewardResolveError, ValueError) as exc:
            raise RunError(str(exc)) from None
        model, tokenizer = load_model_and_tokenizer(cfg)
        dataset, chat_note = apply_chat_template_setting(cfg, dataset, tokenizer)
        g = cfg.grpo
        ref = load_reference(cfg) if g.kl_penalty_coef > 0 else None
        ctx.open_run()
        if ctx.rank == 0:
            print(f"rlft: grpo on {len(dataset)} prompts x {g.group_size} completions; {chat_note}; "
                  f"{ctx.threads_note}", file=sys.stderr)
        hooks = GRPOHooks(group_size=g.group_size, baseline_mode=g.baseline_mode,
                          remove_constant_reward_groups=g.remove_constant_reward_groups,
                          kl_penalty_mode=g.kl_penalty_mode, kl_penalty_coef=g.kl_penalty_coef,
                          kl_discount_factor=g.kl_discount_factor, adaptive_kl=g.adaptive_kl, target_kl=g.target_kl,
                          kl_horizon=g.kl_horizon, completions_path=str(ctx.run.completions),
                          log_completions=cfg.monitor.log_completions)
        trainer = RlftGRPOTrainer(
            model=model,
            reward_funcs=trl_reward_funcs(suite),
            args=grpo_trl_config(cfg, str(ctx.run.checkpoints), ctx.num_processes, composed),
            train_dataset=dataset,
            processing_class=tokenizer,
            peft_config=lora_config(cfg, model),
            callbacks=ctx.callbacks(),
            hooks=hooks,
            reward_suite=suite,
            ref_model_for_kl=ref,
        )
        return ctx.train(trainer, tokenizer)
