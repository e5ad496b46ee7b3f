"""Small trainer callbacks that need no run context (those that call it live beside it:
rlft.runtime.run_callbacks)."""

from __future__ import annotations

from transformers import TrainerCallback

from rlft.monitor.learning_rate import scale_learning_rate


class InterruptCallback(TrainerCallback):
    """After a SIGINT/SIGTERM, end the current step with a checkpoint and stop."""

    def __init__(self, interrupt):
        self.interrupt = interrupt

    def on_step_end(self, args, state, control, **kwargs):
        if self.interrupt.requested():
            control.should_save = True
            control.should_training_stop = True
        return control


class ApplyConfigChanges(TrainerCallback):
    """A resume with --allow-config-change: the optimizer and scheduler states loaded from the checkpoint
    carry the old learning rate and weight decay; put the new ones in (runs after the checkpoint is loaded)."""

    def __init__(self, changes: dict):
        self.changes = changes

    def on_train_begin(self, args, state, control, optimizer=None, lr_scheduler=None, **kwargs):
        if optimizer is None:
            return control
        if "train.learning_rate" in self.changes:
            old, new = self.changes["train.learning_rate"]
            # a ratio keeps the schedule's position (warmup, decay) and every halving so far (a health rollback's
            # factor, ppo.rollback_kl's 0.5 per undone step): 3e-3 halved once to 1.5e-3, then 6e-3, steps at 3e-3
            before = optimizer.param_groups[0]["lr"]
            scale_learning_rate(optimizer, lr_scheduler, float(new) / float(old))
            if state.is_world_process_zero:
                import sys

                print(f"rlft: resumed with learning rate {float(old):g} -> {float(new):g}: the optimizer's rate "
                      f"{before:.4g} -> {optimizer.param_groups[0]['lr']:.4g} (schedule position and any halving "
                      "by a rollback kept)", file=sys.stderr, flush=True)
        if "train.weight_decay" in self.changes:
            old, new = self.changes["train.weight_decay"]
            for group in optimizer.param_groups:
                if group.get("weight_decay") == old:  # groups without decay (biases, norms) keep 0
                    group["weight_decay"] = float(new)
        return control
