"""Small trainer callbacks that tie the run lifecycle to the HF/TRL training loop."""

from __future__ import annotations

from transformers import TrainerCallback

from rlft.monitor.learning_rate import scale_learning_rate
from rlft.monitor.metrics import eval_row


class InterruptCallback(TrainerCallback):
    """After a SIGINT/SIGTERM, end the current step with a checkpoint and stop."""

    def __init__(self, interrupt):
        self.interrupt = interrupt

    def on_step_end(self, args, state, control, **kwargs):
        if self.interrupt.signal is not None:
            control.should_save = True
            control.should_training_stop = True
        return control


class StepBegins(TrainerCallback):
    """Tells the run context when this process's first training step begins (after every checkpoint file
    has loaded, before anything of the step is written)."""

    def __init__(self, ctx):
        self.ctx = ctx

    def on_step_begin(self, args, state, control, **kwargs):
        self.ctx.step_begins()


class ShardingCheck(TrainerCallback):
    """Once the trainer has prepared the model: record how it is laid out across ranks (summary.json's
    `distributed` block) and refuse an FSDP run whose model was not sharded."""

    def __init__(self, ctx):
        self.ctx = ctx

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.ctx.sharding_ready(model if model is not None else self.ctx.trainer.model)
        return control


class CheckpointMarker(TrainerCallback):
    """Runs after every checkpoint save: writes rlft's own state, then the completion marker."""

    def __init__(self, ctx):
        self.ctx = ctx

    def on_save(self, args, state, control, **kwargs):
        self.ctx.mark_complete(self.ctx.trainer)
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


class PeriodicEval(TrainerCallback):
    """Every `every` optimizer steps (the last step excepted: eval.end measures it), fresh samples of the evaluation
    prompts from the policy as it is, logged as one `eval_*` row of metrics.jsonl (and TensorBoard) just before the
    step's training row, for every stage alike. `evaluation` is the lifecycle's Evaluation: its `evaluate` runs on
    every rank (it is collective under FSDP), on `evaluation.model_now(trainer)`.

    The row goes straight to the log callbacks: TRL's `log` would fold its pending training metrics into it."""

    def __init__(self, ctx, evaluation):
        self.ctx, self.evaluation, self.every = ctx, evaluation, evaluation.every

    def on_step_end(self, args, state, control, **kwargs):
        step = state.global_step
        if not self.every or step % self.every or step >= (state.max_steps or 0) or control.should_training_stop:
            return control
        trainer = self.ctx.trainer
        result = self.evaluation.evaluate(self.evaluation.model_now(trainer), step)
        logs = eval_row(result)
        should_log = control.should_log  # on_log clears it: the step's own training row must still be logged
        control = trainer.callback_handler.on_log(args, state, control, logs)
        control.should_log = should_log
        return control
