"""Saving and loading a policy with a value head from a `transformers.Trainer`: the PEFT adapter (or full model)
and the value head, whole or from FSDP shards (rlft's PPO loop, rlft.trainers.ppo)."""

from __future__ import annotations

from pathlib import Path

from transformers import TrainerState

from rlft.runtime.sharding import is_fsdp


class ValueHeadCheckpoints:
    """Mixed into a Trainer whose model is a rlft.models.value_head.PolicyWithValueHead."""
    gathers_to_save = True  # save_model gathers FSDP shards itself (runtime.final.save_whole_model)

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        output_dir = output_dir or self.args.output_dir
        self.accelerator.wait_for_everyone()
        # FSDP: every rank takes part in gathering the weights, rank 0 gets them all (on the CPU)
        state = self.accelerator.get_state_dict(self.model) if is_fsdp(self.accelerator) else None
        if self.args.should_save:
            Path(output_dir).mkdir(parents=True, exist_ok=True)
            self.accelerator.unwrap_model(self.model).save_parts(output_dir, state)

    def _load_checkpoint(self, ckpt: str) -> None:
        self.load_weights_from(ckpt)
        self._load_optimizer_and_scheduler(ckpt)
        self._load_rng_state(ckpt)
        self.state = TrainerState.load_from_json(str(Path(ckpt) / "trainer_state.json"))

    def _load_from_checkpoint(self, resume_from_checkpoint, model=None) -> None:
        """transformers' weight-loading entry (used to redo an interrupted final save): adapter + value head."""
        self.load_weights_from(resume_from_checkpoint)

    def load_weights_from(self, ckpt) -> None:
        """Policy adapter (or full weights) and value head of a checkpoint (resume, health rollback)."""
        if is_fsdp(self.accelerator):  # the checkpoint's whole-model file, into the shards
            from accelerate.utils import load_fsdp_model

            load_fsdp_model(self.accelerator.state.fsdp_plugin, self.accelerator, self.model, str(ckpt))
            return
        self.accelerator.unwrap_model(self.model).load_parts(ckpt)
