"""The run context's own trainer callbacks: they call RunContext (or the lifecycle's Evaluation) from inside the
HF/TRL training loop, so they live here beside it and no call climbs back up from monitor/."""

from __future__ import annotations

from transformers import TrainerCallback

from rlft.monitor.metrics import eval_row


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
