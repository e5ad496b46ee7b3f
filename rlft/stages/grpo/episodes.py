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

Its parts of the run lifecycle (rlft.runtime.lifecycle runs them in order): tokenizer, env and its tasks, minibatch
layout checked (before the run folder) -> policy with a value head (+ KL reference) -> trainer -> eval.start ->
train, with the periodic eval (final adapter) -> eval.end.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlft.config.compose import Composed
from rlft.errors import RunError
from rlft.rundir.options import RunOptions
from rlft.runtime.lifecycle import run_stage
from rlft.stages.common.episode_setup import env_setup, policy_with_value_head
from rlft.stages.common.loop_stage import LoopStage
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
    return run_stage(EpisodeGRPOStage(cfg, composed, opts))


class EpisodeGRPOStage(LoopStage):
    """GRPO over episodes' parts of the run lifecycle (rlft.runtime.lifecycle has the order;
    rlft.stages.common.loop_stage the eval parts it shares with PPO)."""

    def check_inputs(self) -> None:
        """Tokenizer, the environment and its tasks, the minibatch layout: before the run folder, so a bad input
        leaves nothing behind."""
        from rlft.config.load_plan import load_plan
        from rlft.models.loading import tokenizer

        cfg = self.cfg
        self.plan = load_plan(cfg)  # the models build loads, read once (the init_from run's folder included)
        self.tokenizer = tokenizer(self.plan)
        self.env_factory, self.env_guard, self.train_rows, self.evals = env_setup(cfg, self.composed)
        check_layout(cfg)
        self.algorithm = episode_grpo_algorithm(cfg, len(self.train_rows))

    def build(self, ctx) -> None:
        """The policy with its value head (untrained here) and the KL reference, then the interrupt hook (the run
        folder's first use comes after the models loaded), the schedule line, then the trainer."""
        import sys

        from transformers import TrainingArguments

        from rlft.models.hardware import common_training_args

        cfg, s = self.cfg, self.algorithm.schedule
        wrapped, ref = policy_with_value_head(cfg, self.plan, cfg.grpo.kl_penalty_coef)  # the loop's model
        self.interrupt_hooks(ctx)
        args = common_training_args(cfg, str(ctx.run.checkpoints))
        args.update(per_device_train_batch_size=s.mini_batch_size, max_steps=-1, save_steps=s.save_every)
        if ctx.rank == 0:
            print(f"grpo over episodes: {s.num_updates} updates x {cfg.grpo.batch_size} rows x "
                  f"{cfg.grpo.group_size} episodes; {cfg.grpo.ppo_epochs} epoch(s) x {cfg.grpo.num_substeps} "
                  f"minibatch(es)", file=sys.stderr)
        self.loop_trainer(ctx, wrapped, ref, TrainingArguments(**args), self.train_rows, env_factory=self.env_factory,
                          episode_eval_rows=self.evals, algorithm=self.algorithm)
