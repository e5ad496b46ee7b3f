"""Small trainer callbacks that tie the run lifecycle to the HF/TRL training loop."""

from __future__ import annotations

from transformers import TrainerCallback


class InterruptCallback(TrainerCallback):
    """After a SIGINT/SIGTERM, end the current step with a checkpoint and stop."""

    def __init__(self, interrupt):
        self.interrupt = interrupt

    def on_step_end(self, args, state, control, **kwargs):
        if self.interrupt.signal is not None:
            control.should_save = True
            control.should_training_stop = True
        return control


class CheckpointMarker(TrainerCallback):
    """Runs after every checkpoint save: writes rlft's own state, then the completion marker."""

    def __init__(self, ctx):
        self.ctx = ctx

    def on_save(self, args, state, control, **kwargs):
        self.ctx.mark_complete(self.ctx.trainer)
        return control
