"""The final model: written to final.tmp, described (the adapter names its base as the user gave it, a model card
says what rlft trained), then renamed to final/, so a half-written final/ never exists."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from rlft.config.schema import RlftConfig
from rlft.rundir.folder import RunDir
from rlft.runtime.sharding import is_fsdp


def describe_final(folder: Path, cfg: RlftConfig, steps: int, run: RunDir) -> None:
    """The adapter names its base model as the user gave it (not a cache path), and the model card says
    what rlft trained instead of the library boilerplate."""
    from rlft.monitor.model_card import model_card

    adapter = folder / "adapter_config.json"
    if adapter.is_file():
        data = json.loads(adapter.read_text())
        data["base_model_name_or_path"] = cfg.model.name_or_path
        adapter.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    card = model_card(cfg, steps)
    (folder / "README.md").write_text(card)
    if (run.checkpoints / "README.md").is_file():  # TRL's card there says "fine-tuned version of [None]"
        (run.checkpoints / "README.md").write_text(card)


def sharded_checkpoints(trainer) -> bool:
    """FSDP with sharded checkpoints (full fine-tuning): transformers' save_model writes no weights then."""
    plugin = getattr(trainer.accelerator.state, "fsdp_plugin", None)
    return is_fsdp(trainer.accelerator) and "SHARDED" in str(plugin.state_dict_type)


def save_whole_model(trainer, folder) -> None:
    """The trained model as one loadable folder (a PEFT adapter or a transformers model), on every rank (under FSDP
    the weights are gathered from all of them; rank 0 writes). A trainer that gathers for itself (PPO's policy
    and value head) saves as it does."""
    if sharded_checkpoints(trainer) and not getattr(trainer, "gathers_to_save", False):
        trainer._save(str(folder), state_dict=trainer.accelerator.get_state_dict(trainer.model))
    else:
        trainer.save_model(str(folder))


def save_final(trainer, tokenizer, cfg: RlftConfig, run: RunDir) -> None:
    """A standard PEFT adapter (or full model) + tokenizer that plain `from_pretrained` loads."""
    tmp = run.root / "final.tmp"
    if trainer.args.should_save and tmp.exists():
        shutil.rmtree(tmp)  # left by a save that was killed half-way
    save_whole_model(trainer, tmp)
    if trainer.args.should_save:
        tokenizer.save_pretrained(str(tmp))
        describe_final(tmp, cfg, trainer.state.global_step, run)
        if run.final.exists():
            shutil.rmtree(run.final)
        tmp.rename(run.final)
        run.drop_replaced()
        print(f"rlft: done at step {trainer.state.global_step}; final model in {run.final}", file=sys.stderr)


def save_final_again(trainer, tokenizer, checkpoint: Path, cfg: RlftConfig, run: RunDir) -> None:
    """A run killed during its final save: the last checkpoint's weights and state, saved as the final model."""
    from transformers import TrainerState

    trainer._load_from_checkpoint(str(checkpoint))  # the weights only; nothing left to train
    trainer.state = TrainerState.load_from_json(str(checkpoint / "trainer_state.json"))
    save_final(trainer, tokenizer, cfg, run)
