"""PPO recipe: causal LM + LoRA with a value head on the same backbone, reward functions, rlft's
own PPO trainer (TRL 1.x has none).

Lifecycle, top to bottom: run folder -> model + tokenizer + value head -> data -> rewards ->
trainer settings -> train -> final adapter + value_head.safetensors.
"""

from __future__ import annotations

from rlft.config.compose import Composed
from rlft.config.render import episodes_to_updates, ppo_schedule
from rlft.config.schema import RlftConfig
from rlft.run import RunError, RunOptions


def ppo_settings(cfg: RlftConfig):
    from rlft.trainers.ppo import PPOSettings

    p = cfg.ppo
    return PPOSettings(
        batch_size=p.batch_size, mini_batch_size=p.mini_batch_size,
        gradient_accumulation_steps=cfg.train.gradient_accumulation_steps, ppo_epochs=p.ppo_epochs,
        clip_range=p.clip_range, cliprange_value=p.cliprange_value, vf_coef=p.vf_coef, ent_coef=p.ent_coef,
        kl_penalty=p.kl_penalty, init_kl_coef=p.init_kl_coef, target_kl=p.target_kl, adaptive_kl=p.adaptive_kl,
        kl_horizon=p.kl_horizon, gamma=p.gamma, lam=p.lam, num_episodes=p.num_episodes,
        log_every=episodes_to_updates(p.log_interval, p.batch_size),
        eval_every=episodes_to_updates(p.eval_interval, p.batch_size),
        save_every=episodes_to_updates(p.save_interval, p.batch_size),
        temperature=p.temperature, top_p=p.top_p, max_tokens=p.max_tokens,
        seed=cfg.train.seed)


def training_arguments(cfg: RlftConfig, output_dir: str):
    """transformers TrainingArguments for optimizer, scheduler, precision and saving; PPO's own
    counts (updates, intervals) live in PPOSettings."""
    from transformers import TrainingArguments

    from rlft.models.hardware import common_training_args

    args = common_training_args(cfg, output_dir)
    args.update(per_device_train_batch_size=cfg.ppo.mini_batch_size, max_steps=-1,
                save_steps=episodes_to_updates(cfg.ppo.save_interval, cfg.ppo.batch_size))
    return TrainingArguments(**args)


def ppo_evaluation(cfg: RlftConfig, dataset, tokenizer, suite):
    """`policy -> {"reward_mean", ...}`: one fresh sample per evaluation prompt with PPO's sampling settings
    and a fixed seed, or None when data.eval_prompts is 0."""
    from rlft.rollout import EVAL_SEED_OFFSET, SamplingParams, evaluate
    from rlft.stages.prompt_data import eval_rows

    rows = eval_rows(cfg, dataset, tokenizer, suite)  # data.eval checked like the training prompts
    if not rows:
        return None
    prompts = [r["prompt"] for r in rows]
    columns = {k: [r.get(k) for r in rows] for k in rows[0] if k not in ("prompt", "prompt_id")}
    p = cfg.ppo
    params = SamplingParams(temperature=p.temperature, top_p=p.top_p, max_new_tokens=p.max_tokens,
                            batch_size=p.batch_size, seed=cfg.train.seed + EVAL_SEED_OFFSET)
    return lambda policy: evaluate(policy, tokenizer, suite, prompts, columns, 1, params)


def run(cfg: RlftConfig, composed: Composed, opts: RunOptions) -> int:
    import sys

    from rlft.runtime import RunContext, quiet_libraries

    quiet_libraries(opts.verbose)
    from rlft.models.loading import load_policy, load_policy_tokenizer, load_reference, lora_config
    from rlft.rewards import RewardResolveError, build_reward_suite
    from rlft.stages.prompt_data import prepare_prompt_data

    # rewards and data are checked before the run folder exists: a bad input leaves nothing behind
    try:
        suite = build_reward_suite([vars(r) for r in cfg.rewards], config_dir=composed.dir_of("rewards"),
                                   max_failure_fraction=cfg.monitor.max_reward_failure_fraction)
    except (RewardResolveError, ValueError) as exc:
        raise RunError(str(exc)) from None
    tokenizer = load_policy_tokenizer(cfg)
    dataset = prepare_prompt_data(cfg, tokenizer, suite)
    evaluation = ppo_evaluation(cfg, dataset, tokenizer, suite)
    with RunContext(cfg, composed, opts) as ctx:
        from peft import get_peft_model

        from rlft.models.value_head import PolicyWithValueHead, hidden_size_of
        from rlft.trainers.ppo import RlftPPOTrainer

        suite.abort_when(lambda: ctx.interrupt.signal is not None)  # Ctrl-C never waits on a hung reward
        model = load_policy(cfg)
        if cfg.train.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        peft_cfg = lora_config(cfg, model)
        policy = get_peft_model(model, peft_cfg) if peft_cfg is not None else model
        wrapped = PolicyWithValueHead(policy, hidden_size_of(model))
        ref = load_reference(cfg) if cfg.ppo.init_kl_coef > 0 else None
        if ref is None and not hasattr(policy, "disable_adapter") and cfg.ppo.init_kl_coef > 0:
            # full fine-tuning: no adapter to disable, so a frozen copy of the starting weights
            ref = load_policy(cfg).eval().requires_grad_(False)
        if ctx.rank == 0:
            print(ppo_schedule(cfg).lstrip("# "), file=sys.stderr)
        trainer = RlftPPOTrainer(
            model=wrapped,
            args=training_arguments(cfg, str(ctx.run.checkpoints)),
            processing_class=tokenizer,
            settings=ppo_settings(cfg),
            train_rows=dataset.to_list(),
            evaluation=evaluation,
            reward_suite=suite,
            callbacks=ctx.callbacks(),
            completions_path=str(ctx.run.completions),
            log_completions=cfg.monitor.log_completions,
            eval_out=ctx.eval,
            ref_model=ref.to(wrapped.value_head.weight.device) if ref is not None else None,
        )
        return ctx.train(trainer, tokenizer)
