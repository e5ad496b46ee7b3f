"""GRPO over multi-turn episodes (`--stage grpo` with `env.name`): rlft's PPO loop (`rlft.trainers.ppo`) configured
as GRPO (`rlft.trainers.loop_algorithm.episode_grpo_algorithm`), since TRL's GRPOTrainer has no per-step rewards
(its `environment_factory` calls `get_reward` once at the end) and no per-turn masks.

A group is `group_size` episodes of the same row and seed; each episode's score is its discounted return
sum_k episode_gamma^k r_k over turns, the group baseline (`grpo.baseline_mode`) turns it into one advantage, spread
over the episode's action tokens (observations stay masked); grpo.loss_fn's loss, no critic (the value head stays
untrained).

Counting: one update = `grpo.batch_size` rows x `grpo.group_size` episodes; updates = `train.max_steps`,
or `train.num_train_epochs` passes over the rows; `train.logging_steps`, `eval_steps` and `save_steps`
are in updates. Each update: `grpo.ppo_epochs` passes of `grpo.num_substeps` minibatches, one optimizer
step each.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlft.config.compose import Composed
from rlft.errors import RunError
from rlft.rundir.options import RunOptions
from rlft.trainers.loop_algorithm import episode_grpo_algorithm

if TYPE_CHECKING:
    from rlft.config.schema import RlftConfig


def check_layout(cfg: RlftConfig) -> None:
    """An update's episodes split into grpo.num_substeps equal minibatches (RunError, exit 2, otherwise)."""
    g = cfg.grpo
    episodes = g.batch_size * g.group_size
    if episodes % g.num_substeps:
        raise RunError(f"grpo.num_substeps ({g.num_substeps}) must divide grpo.batch_size x grpo.group_size "
                       f"({episodes} episodes per update)")


def run(cfg: RlftConfig, composed: Composed, opts: RunOptions) -> int:
    import sys

    from rlft.runtime import RunContext, quiet_libraries

    quiet_libraries(opts.verbose)
    from rlft.models.loading import load_policy_tokenizer
    from rlft.stages.common.episode_setup import env_setup, policy_with_value_head

    tokenizer = load_policy_tokenizer(cfg)
    env_factory, guard, train_rows, evals = env_setup(cfg, composed)  # before the run folder: bad input leaves nothing
    check_layout(cfg)
    algorithm = episode_grpo_algorithm(cfg, len(train_rows))
    s = algorithm.schedule
    with RunContext(cfg, composed, opts) as ctx:
        from transformers import TrainingArguments

        from rlft.models.hardware import common_training_args
        from rlft.trainers.ppo import RlftPPOTrainer

        guard.should_abort = lambda: ctx.interrupt.signal is not None
        # the loop's model; its value head stays untrained here
        wrapped, ref = policy_with_value_head(cfg, cfg.grpo.kl_penalty_coef)
        args = common_training_args(cfg, str(ctx.run.checkpoints))
        args.update(per_device_train_batch_size=s.mini_batch_size, max_steps=-1, save_steps=s.save_every)
        if ctx.rank == 0:
            print(f"grpo over episodes: {s.num_updates} updates x {cfg.grpo.batch_size} rows x "
                  f"{cfg.grpo.group_size} episodes; {cfg.grpo.ppo_epochs} epoch(s) x {cfg.grpo.num_substeps} "
                  f"minibatch(es)", file=sys.stderr)
        trainer = RlftPPOTrainer(
            model=wrapped, args=TrainingArguments(**args), processing_class=tokenizer, cfg=cfg,
            train_rows=train_rows, reward_suite=None, callbacks=ctx.callbacks(), run=ctx.run, eval_out=ctx.eval,
            ref_model=ref.to(wrapped.value_head.weight.device) if ref is not None else None,
            env_factory=env_factory, env_guard=guard, episode_eval_rows=evals, algorithm=algorithm)
        return ctx.train(trainer, tokenizer)
