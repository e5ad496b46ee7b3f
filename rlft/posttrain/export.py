"""`rlft export`: the adapter (its base named as the run gave it) or, merged, a plain transformers model folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from rlft.errors import RunError
from rlft.posttrain.policy import load_trained_policy
from rlft.posttrain.target import Target, adapter_config, run_model_name


def check_export_dir(out: Path) -> None:
    """The export goes to a new or empty folder: never mixed with, or over, files the user has."""
    if out.exists() and not out.is_dir():
        raise RunError(f"-o {out} is a file; choose a new or empty folder")
    if out.is_dir() and any(out.iterdir()):
        raise RunError(f"-o {out} exists and is not empty; choose a new or empty folder")


def export(target: Target, out: Path, merge: bool) -> Path:
    """`merge`: the adapter merged into its base, saved as a plain transformers model folder; otherwise
    the adapter itself. Either way the base is recorded by the model's name as the run gave it (or the
    merged model stands alone), never by a path that only exists on this machine."""
    check_export_dir(out)
    name = run_model_name(target.run_root)
    adapter_cfg = adapter_config(target.weights) if target.is_adapter else {}  # damaged: said before writing anything
    if not target.is_adapter:
        if merge:
            raise RunError(f"{target.weights} is a full model already (no adapter to merge); copy the folder instead")
    if merge:
        from rlft import progress

        model, tokenizer = load_trained_policy(target)
        with progress.task(f"merging and writing {out}"):
            merged = model.merge_and_unload()
            merged.config._name_or_path = name or ""
            merged.save_pretrained(str(out))
            tokenizer.save_pretrained(str(out))
    else:
        shutil.copytree(target.weights, out, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("optimizer.pt", "scheduler.pt", "rng_state*",
                                                                          "trainer_state.json", "training_args.bin",
                                                                          "rlft_*"))
        if not target.is_adapter:  # a full model folder: copied as it is
            return out
        cfg_path = out / "adapter_config.json"
        recorded = adapter_cfg.get("base_model_name_or_path")
        recorded = recorded if isinstance(recorded, str) else ""
        if name:  # the base as the user named it: a hub id, rlft's `tiny`, or their own path
            adapter_cfg["base_model_name_or_path"] = name
        elif Path(recorded).is_absolute():
            adapter_cfg["base_model_name_or_path"] = Path(recorded).name
        cfg_path.write_text(json.dumps(adapter_cfg, indent=2) + "\n")
        card = out / "README.md"
        if card.is_file() and Path(recorded).is_absolute():  # PEFT's model card repeats the base path
            card.write_text(card.read_text().replace(recorded, adapter_cfg["base_model_name_or_path"]))
    return out
