"""TRL's RewardTrainer with a final model that loads alone: checkpoints stay PEFT adapters (resume and rollback
load them as every stage's do), while the final save merges the adapter and the trained score head into the
model and writes a plain AutoModelForSequenceClassification folder, with a note of how it scores
(`rlft_reward_model.json`, read by the `reward_model` reward)."""

from __future__ import annotations

import json
from pathlib import Path

from trl import RewardTrainer

from rlft import run_files

SCORING_FILE = run_files.REWARD_MODEL_SCORING  # rlft.rewards.reward_model reads it


class RlftRewardTrainer(RewardTrainer):
    def __init__(self, *args, scoring: dict | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.scoring = scoring or {}  # how pairs were rendered: {"chat": bool}

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False):
        if _internal_call or output_dir is None:  # a checkpoint: the adapter, as every stage saves one
            return super().save_model(output_dir, _internal_call)
        from peft import PeftModel

        model = self.accelerator.unwrap_model(self.model)
        if isinstance(model, PeftModel):
            # in place: the merged layers replace the LoRA ones inside the PeftModel too, so the model the run
            # evaluates at its end scores exactly as the folder written here
            model = model.merge_and_unload()
        if self.args.should_save:
            model.save_pretrained(output_dir, safe_serialization=True)
            (Path(output_dir) / SCORING_FILE).write_text(json.dumps(self.scoring, indent=2) + "\n")
