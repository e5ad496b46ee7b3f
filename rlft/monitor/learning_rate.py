"""Scaling a running optimizer's learning rate so that its scheduler keeps the change.

transformers' schedules are `LambdaLR`s: each step sets lr = base_lr x factor(step), so a change made to the
param groups alone is undone at the next step. The scale goes into the scheduler's `base_lrs` too (which its
state_dict, and so every checkpoint, keeps) and into each group's `initial_lr`, where a new scheduler would read it.
Used by the health monitor's rollback, a resume's changed learning rate and PPO's `rollback_kl`.
"""

from __future__ import annotations

__all__ = ["scale_learning_rate"]


def scale_learning_rate(optimizer, lr_scheduler, factor: float) -> None:
    """Multiplies the learning rate of every param group of `optimizer` (accelerate's wrapper or torch's) by `factor`,
    now and for the rest of `lr_scheduler`'s schedule; the scheduler's last learning rate (the logged one) follows."""
    optimizer = getattr(optimizer, "optimizer", optimizer)
    scheduler = getattr(lr_scheduler, "scheduler", lr_scheduler)
    for group in optimizer.param_groups:
        group["lr"] *= factor
        if "initial_lr" in group:
            group["initial_lr"] *= factor
    if hasattr(scheduler, "base_lrs"):
        scheduler.base_lrs = [lr * factor for lr in scheduler.base_lrs]
        scheduler._last_lr = [group["lr"] for group in optimizer.param_groups]
