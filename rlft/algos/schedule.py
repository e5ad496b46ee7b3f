"""The counts rlft's own RL loop runs by (PPO; GRPO over multi-turn episodes), derived from the config by
one function each. Plain arithmetic without torch: a runner prints them and builds its TrainingArguments
from them before a model loads, and the trainer runs by the same numbers."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rlft.config.stagespec import episodes_to_updates

if TYPE_CHECKING:
    from rlft.config.schema import RlftConfig


@dataclass(frozen=True)
class LoopSchedule:
    batch_size: int                  # episodes per update, over all processes
    mini_batch_size: int             # episodes per forward/backward pass, over all processes
    minibatches_per_step: int        # minibatches accumulated into one optimizer step (at most one epoch's worth)
    optimizer_steps_per_update: int  # ppo_epochs x the optimizer steps of one epoch
    num_updates: int                 # a metrics row and a checkpoint step is one update
    log_every: int                   # the intervals, in updates
    eval_every: int
    save_every: int

    def local_sizes(self, processes: int) -> tuple[int, int]:
        """(episodes, minibatch episodes) per process: each process takes an equal share of both."""
        if self.batch_size % processes or self.mini_batch_size % processes:
            from rlft.errors import RunError

            raise RunError(f"the loop's batch ({self.batch_size} episodes) and minibatch ({self.mini_batch_size}) "
                           f"must be divisible by the {processes} processes: each process takes an equal share of both")
        return self.batch_size // processes, self.mini_batch_size // processes


def _loop(batch_size: int, mini_batch_size: int, gradient_accumulation_steps: int, ppo_epochs: int,
          num_updates: int, log_every: int, eval_every: int, save_every: int) -> LoopSchedule:
    per_epoch = batch_size // mini_batch_size
    per_step = max(1, min(gradient_accumulation_steps, per_epoch))
    return LoopSchedule(batch_size=batch_size, mini_batch_size=mini_batch_size, minibatches_per_step=per_step,
                        optimizer_steps_per_update=ppo_epochs * math.ceil(per_epoch / per_step),
                        num_updates=num_updates, log_every=log_every, eval_every=eval_every, save_every=save_every)


def ppo_loop_schedule(cfg: RlftConfig) -> LoopSchedule:
    """PPO counts episodes: ppo.num_episodes and the ppo.*_interval keys in updates of ppo.batch_size episodes."""
    p = cfg.ppo
    return _loop(p.batch_size, p.mini_batch_size, cfg.train.gradient_accumulation_steps, p.ppo_epochs,
                 math.ceil(p.num_episodes / p.batch_size), episodes_to_updates(p.log_interval, p.batch_size),
                 episodes_to_updates(p.eval_interval, p.batch_size), episodes_to_updates(p.save_interval, p.batch_size))


def episode_grpo_loop_schedule(cfg: RlftConfig, num_rows: int) -> LoopSchedule:
    """GRPO over episodes: an update is grpo.batch_size rows x grpo.group_size episodes, in grpo.num_substeps
    minibatches of one optimizer step each; updates = train.max_steps, or train.num_train_epochs passes over the
    `num_rows` rows; train.logging_steps / eval_steps / save_steps count updates."""
    g, t = cfg.grpo, cfg.train
    episodes = g.batch_size * g.group_size
    updates = t.max_steps if t.max_steps > 0 else max(1, math.ceil(t.num_train_epochs * num_rows / g.batch_size))
    return _loop(episodes, episodes // g.num_substeps, 1, g.ppo_epochs, updates, t.logging_steps, t.eval_steps,
                 t.save_steps)
