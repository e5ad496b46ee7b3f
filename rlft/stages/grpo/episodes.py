"""GRPO over multi-turn episodes (`--stage grpo` with `env.name`): rlft's PPO loop (`rlft.trainers.ppo`) configured
as GRPO (`rlft.algos.loop_algorithm.episode_grpo_algorithm`), since TRL's GRPOTrainer has no per-step rewards
(its `environment_factory` calls `get_reward` once at the end) and no per-turn masks.

A group is `group_size` episodes of the same row and seed; each episode's score is its discounted return
sum_k episode_gamma^k r_k over turns, the group baseline (`grpo.baseline_mode`) turns it into one advantage, spread
over the episode's action tokens (observations stay masked); grpo.loss_fn's loss, no critic (the value head stays
untrained).

Counting: one update = `grpo.batch_size` rows x `grpo.group_size` episodes; updates = `train.max_steps`,
or `train.num_train_epochs` passes over the rows; `train.logging_steps`, `eval_steps` and `save_steps`
are in updates. Each update: `grpo.ppo_epochs` passes of `grpo.num_substeps` minibatches, one optimizer
step each.

Its parts of the run lifecycle (rlft.runtime.lifecycle runs them in order): inputs (tokenizer, env and its tasks,
minibatch layout, checked before the run folder) -> model (policy with a value head + KL reference) -> run folder ->
trainer -> eval.start -> train, with the periodic eval (final adapter) -> eval.end.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlft.algos.loop_algorithm import episode_grpo_algorithm
from rlft.config.compose import Composed
from rlft.errors import RunError
from rlft.rundir.options import RunOptions
from rlft.runtime.lifecycle import StageInputs, run_stage
from rlft.stages.common.episode_setup import env_setup, policy_with_value_head
from rlft.stages.common.loop_stage import LoopStage

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
    rlft.stages.common.loop_stage the trainer and the eval parts it shares with PPO)."""

    def inputs(self) -> StageInputs:
        """Tokenizer, the environment and its tasks, the minibatch layout: before the run folder, so a bad input
        leaves nothing behind."""
        from rlft.config.load_plan import load_plan
        from rlft.models.loading import tokenizer

        cfg = self.cfg
        plan = load_plan(cfg)  # the models the stage loads, read once (the init_from run's folder included)
        tok = tokenizer(plan)
        env_factory, env_guard, train_rows, evals = env_setup(cfg, self.composed)
        check_layout(cfg)
        return StageInputs(tokenizer=tok, train=train_rows, plan=plan, extra=dict(
            env_factory=env_factory, env_guard=env_guard, episode_eval_rows=evals,
            algorithm=episode_grpo_algorithm(cfg, len(train_rows))))

    def model(self, inputs: StageInputs) -> tuple:
        """(the policy with its value head (untrained here), the KL reference or None)."""
        return policy_with_value_head(self.cfg, inputs.plan, self.cfg.grpo.kl_penalty_coef)

    def trainer(self, ctx, model: tuple, inputs: StageInputs):
        """The schedule line, then the loop's trainer."""
        import sys

        from transformers import TrainingArguments

        from rlft.models.hardware import common_training_args

        cfg, s = self.cfg, inputs.extra["algorithm"].schedule
        args = common_training_args(cfg, str(ctx.run.checkpoints))
        args.update(per_device_train_batch_size=s.mini_batch_size, max_steps=-1, save_steps=s.save_every)
        if ctx.rank == 0:
            print(f"grpo over episodes: {s.num_updates} updates x {cfg.grpo.batch_size} rows x "
                  f"{cfg.grpo.group_size} episodes; {cfg.grpo.ppo_epochs} epoch(s) x {cfg.grpo.num_substeps} "
                  f"minibatch(es)", file=sys.stderr)
        wrapped, ref = model
        return self.loop_trainer(ctx, wrapped, ref, TrainingArguments(**args), inputs)
