"""GRPO over multi-turn episodes (`--stage grpo` with `env.name`): rlft's episode GRPO trainer
(`rlft.trainers.grpo_episodes`) on the PPO loop, since TRL's GRPOTrainer has no per-step rewards.

Counting: one update = `grpo.batch_size` rows x `grpo.group_size` episodes; updates = `train.max_steps`,
or `train.num_train_epochs` passes over the rows; `train.logging_steps`, `eval_steps` and `save_steps`
are in updates. Each update: `grpo.ppo_epochs` passes of `grpo.num_substeps` minibatches, one optimizer
step each.
"""

from __future__ import annotations

import math

from rlft.config.compose import Composed
from rlft.config.schema import RlftConfig
from rlft.run import RunError, RunOptions


def num_updates(cfg: RlftConfig, num_rows: int) -> int:
    t = cfg.train
    return t.max_steps if t.max_steps > 0 else max(1, math.ceil(t.num_train_epochs * num_rows / cfg.grpo.batch_size))


def settings(cfg: RlftConfig, num_rows: int):
    from rlft.trainers.grpo_episodes import EpisodeGRPOSettings

    g, t = cfg.grpo, cfg.train
    episodes = g.batch_size * g.group_size
    if episodes % g.num_substeps:
        raise RunError(f"grpo.num_substeps ({g.num_substeps}) must divide grpo.batch_size x grpo.group_size "
                       f"({episodes} episodes per update)")
    return EpisodeGRPOSettings(
        batch_size=episodes, mini_batch_size=episodes // g.num_substeps, gradient_accumulation_steps=1,
        ppo_epochs=g.ppo_epochs, clip_range=g.clip_range, vf_coef=0.0, ent_coef=0.0,
        init_kl_coef=g.kl_penalty_coef, target_kl=g.target_kl, adaptive_kl=g.adaptive_kl and g.kl_penalty_coef > 0,
        kl_horizon=g.kl_horizon, num_episodes=num_updates(cfg, num_rows) * episodes,
        log_every=t.logging_steps, eval_every=t.eval_steps, save_every=t.save_steps,
        temperature=g.temperature, top_p=g.top_p, max_tokens=g.max_tokens, seed=t.seed,
        max_episode_length=cfg.env.max_episode_length, max_seq_length=t.max_seq_length,
        group_size=g.group_size, baseline_mode=g.baseline_mode, episode_gamma=g.episode_gamma,
        max_steps_off_policy=g.async_.max_steps_off_policy)


def run(cfg: RlftConfig, composed: Composed, opts: RunOptions) -> int:
    import sys

    from rlft.runtime import RunContext, quiet_libraries

    quiet_libraries(opts.verbose)
    from rlft.models.loading import load_policy_tokenizer
    from rlft.stages.ppo.runner import env_setup, policy_with_value_head

    tokenizer = load_policy_tokenizer(cfg)
    env_factory, guard, train_rows, evals = env_setup(cfg, composed)  # before the run folder: bad input leaves nothing
    s = settings(cfg, len(train_rows))
    with RunContext(cfg, composed, opts) as ctx:
        from transformers import TrainingArguments

        from rlft.models.hardware import common_training_args
        from rlft.trainers.grpo_episodes import RlftEpisodeGRPOTrainer

        guard.should_abort = lambda: ctx.interrupt.signal is not None
        # the loop's model; its value head stays untrained here
        wrapped, ref = policy_with_value_head(cfg, cfg.grpo.kl_penalty_coef)
        args = common_training_args(cfg, str(ctx.run.checkpoints))
        args.update(per_device_train_batch_size=s.mini_batch_size, max_steps=-1, save_steps=s.save_every)
        if ctx.rank == 0:
            print(f"grpo over episodes: {s.num_updates} updates x {cfg.grpo.batch_size} rows x "
                  f"{cfg.grpo.group_size} episodes; {s.ppo_epochs} epoch(s) x {cfg.grpo.num_substeps} minibatch(es)",
                  file=sys.stderr)
        trainer = RlftEpisodeGRPOTrainer(
            model=wrapped, args=TrainingArguments(**args), processing_class=tokenizer, settings=s,
            train_rows=train_rows, reward_suite=None, callbacks=ctx.callbacks(),
            completions_path=str(ctx.run.completions), log_completions=cfg.monitor.log_completions,
            eval_out=ctx.eval, ref_model=ref.to(wrapped.value_head.weight.device) if ref is not None else None,
            env_factory=env_factory, env_guard=guard, episode_eval_rows=evals)
        return ctx.train(trainer, tokenizer)
