"""`ppo.rollback_kl`: undo an optimizer step that moves the policy too far from the one that sampled the batch.

Why: Adam gives every trainable parameter a step of about the learning rate whatever its gradient's size (on the
first step after zero gradients, exactly the learning rate times the gradient's sign), so a LoRA policy that already
succeeds can be pushed past a close token choice by a few steps that PPO's clip never sees (docs/benchmarks.md,
the real-model tool bench). `early_stop_kl` stops *after* such a step; this keeps a copy of the trainable weights
and the optimizer's moments before each step and restores them when the next KL check finds the policy past the
bound, then halves the learning rate for the rest of the run (TRPO's backtracking, for Adam's fixed-size steps).

`UpdateGuard` holds both KL guards of one update's optimizer steps (`early_stop_kl` and this).

rlft's own (neither TRL nor accelerate has one). The learning rate is halved through the scheduler's `base_lrs`
(rlft.monitor.learning_rate), which its state_dict keeps, so a resumed run goes on at the halved rate.
"""

from __future__ import annotations

import torch

from rlft.monitor.learning_rate import scale_learning_rate

__all__ = ["StepRollback", "UpdateGuard"]


class StepRollback:
    """The weights and optimizer state of `params` as they were before the last optimizer step, to restore."""

    def __init__(self, params: list, optimizer, lr_scheduler, limit: float):
        self.params = params
        self.optimizer = getattr(optimizer, "optimizer", optimizer)  # accelerate's wrapper holds torch's
        self.scheduler = lr_scheduler
        self.limit = limit
        self.pending = False  # a step was taken and no KL has been checked since
        self.undone = 0
        self._weights: list | None = None
        self._moments: list | None = None

    @classmethod
    def of_section(cls, section, model, optimizer, lr_scheduler) -> StepRollback | None:
        """The guard over one update's steps of `model`'s trainable weights; None when `rollback_kl` is off (or
        the section has no such key: episode GRPO's)."""
        limit = getattr(section, "rollback_kl", None)
        if limit is None:
            return None
        return cls([q for q in model.parameters() if q.requires_grad], optimizer, lr_scheduler, limit)

    def before_step(self) -> None:
        """Copies the trainable weights and their optimizer state (Adam's moments and step count)."""
        with torch.no_grad():
            self._weights = [p.detach().clone() for p in self.params]
        self._moments = [None if p not in self.optimizer.state else
                         {k: v.clone() if torch.is_tensor(v) else v for k, v in self.optimizer.state[p].items()}
                         for p in self.params]
        self.pending = True

    def check(self, kl: float) -> bool:
        """Whether the policy stays within the bound (`kl`: the mean approx KL from the sampling policy, the same on
        every process); past it, the last step is undone and the learning rate halved."""
        self.pending = False
        if kl <= self.limit:
            return True
        with torch.no_grad():
            for p, w in zip(self.params, self._weights):
                p.copy_(w)
        for p, saved in zip(self.params, self._moments):
            if saved is None:
                self.optimizer.state.pop(p, None)
            else:
                self.optimizer.state[p] = saved
        scale_learning_rate(self.optimizer, self.scheduler, 0.5)
        self.undone += 1
        return False


class UpdateGuard:
    """One update's KL guards over its `planned` optimizer steps: `early_stop_kl` ends the update's passes once the
    policy's mean approx KL from the sampler is past it; `rollback_kl` (StepRollback) also undoes the step that took
    it there. The KL is checked at a step's first minibatch after the update's first step, on every process alike."""

    def __init__(self, section, model, optimizer, lr_scheduler, planned: int):
        self.stop_kl = getattr(section, "early_stop_kl", None)  # PPO's keys; episode GRPO's section has none
        self.rollback = StepRollback.of_section(section, model, optimizer, lr_scheduler)
        self.scheduler = lr_scheduler
        self.planned, self.steps = planned, 0

    @property
    def active(self) -> bool:
        return self.stop_kl is not None or self.rollback is not None

    def checks_at(self, minibatch: int, per_step: int) -> bool:
        """Whether the KL is checked at this minibatch (the first of a step, once a step was taken)."""
        return self.active and minibatch % per_step == 0 and self.steps > 0

    @property
    def last_step_unchecked(self) -> bool:
        return self.rollback is not None and self.rollback.pending

    def stops(self, kl: float) -> bool:
        """Whether the update stops here: the last step undone (rollback_kl), or the policy past early_stop_kl."""
        if self.last_step_unchecked and not self.rollback.check(kl):
            return True
        return self.stop_kl is not None and kl > self.stop_kl

    def before_step(self) -> None:
        if self.rollback is not None:
            self.rollback.before_step()

    def stepped(self) -> None:
        self.steps += 1

    def finish(self) -> dict:
        """The update's guard metrics; the skipped steps still advance the lr schedule (it counts every planned
        step: num_training_steps)."""
        out: dict = {}
        if not self.active:
            return out
        for _ in range(self.planned - self.steps):
            self.scheduler.step()
        if self.stop_kl is not None:
            out["early_stop"] = (self.planned - self.steps) / self.planned
        if self.rollback is not None:
            out["rollback"] = float(self.rollback.undone)
            # 1: every step this update took was undone, the policy is where it started (health: all_steps_undone)
            out["frac_steps_undone"] = self.rollback.undone / self.steps if self.steps else 0.0
        return out
