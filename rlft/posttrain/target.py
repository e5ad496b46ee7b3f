"""What a RUN_OR_ADAPTER argument points at (`resolve_target` -> `Target`), and what rlft reads from it: its
run's config.yaml (`run_config`, `run_model_name`) and its adapter_config.json (`adapter_config`)."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from rlft.errors import RunError
from rlft.rundir.folder import checkpoint_step
from rlft.config.run_config import RunConfigError, read_run_config
from rlft import run_files


@dataclass
class Target:
    """What a RUN_OR_ADAPTER argument points at."""
    weights: Path              # the adapter folder (adapter_config.json) or the full model folder
    is_adapter: bool
    run_root: Path | None      # the run folder, when the target is (in) one
    step: int | None           # the checkpoint step, when known


def resolve_target(path: Path, checkpoint: int | None = None) -> Target:
    """A run folder (its final/ model, or checkpoints/checkpoint-N with `checkpoint`), a checkpoint folder,
    an adapter folder or a model folder; a clear RunError otherwise."""
    path = Path(path)
    if not path.exists():
        raise RunError(f"{path}: no such run, checkpoint or model folder")
    run_root = None
    checkpoints = path / run_files.CHECKPOINTS
    if (path / run_files.CONFIG).is_file() and ((path / run_files.FINAL).exists() or checkpoints.is_dir()):
        run_root = path
        if checkpoint is not None:
            path = checkpoints / run_files.checkpoint_name(checkpoint)
            if not path.is_dir():
                have = sorted(checkpoint_step(p) for p in checkpoints.glob(run_files.CHECKPOINT_GLOB))
                raise RunError(f"{path}: no such checkpoint (this run has: {', '.join(map(str, have)) or 'none'})")
        elif (path / run_files.FINAL).is_dir():
            path = path / run_files.FINAL
        else:
            done = sorted(checkpoints.glob(run_files.CHECKPOINT_GLOB), key=checkpoint_step)
            if not done:
                raise RunError(f"{run_root}: the run has neither final/ nor a checkpoint yet")
            path = done[-1]
            print(f"rlft: {run_root} has no final/ yet; using its newest checkpoint {path.name}", file=sys.stderr)
    elif checkpoint is not None:
        raise RunError("--checkpoint needs a run folder (the one holding config.yaml and checkpoints/)")
    elif path.name == "final" or path.parent.name == "checkpoints":
        candidate = path.parent if path.name == "final" else path.parent.parent
        run_root = candidate if (candidate / run_files.CONFIG).is_file() else None
    if (path / "adapter_config.json").is_file():
        adapter = True
    elif (path / "config.json").is_file():
        adapter = False
    else:
        raise RunError(f"{path}: neither a PEFT adapter (adapter_config.json) nor a transformers model (config.json)")
    step = checkpoint_step(path) if path.parent.name == "checkpoints" else None
    run_config(run_root)  # a damaged config.yaml: one line now, not a traceback after loading the model
    check_chain(run_root)
    return Target(weights=path, is_adapter=adapter, run_root=run_root, step=step)


def check_chain(run_root: Path | None) -> None:
    """A run that started from earlier runs (`model.init_from`) is used only while each of them is still the run it
    trained on (the hash its config.yaml recorded): RunError naming both runs and hashes otherwise, before any model
    loads (its adapter on other weights would be a model nobody trained)."""
    from rlft.config.init_from import ChainError, chain_of

    if run_root is None:
        return
    try:
        chain_of(run_root)
    except ChainError as exc:
        raise RunError(f"model.init_from: {exc}") from None


def run_config(run_root: Path | None) -> dict:
    """The run's config.yaml ({} without one); a RunError naming the file when it is not the settings a run writes."""
    if run_root is None or not (run_root / run_files.CONFIG).is_file():
        return {}
    try:
        data = read_run_config(run_root)
    except RunConfigError as exc:
        what = f"not readable YAML ({exc.why})" if exc.found is None else "the whole file is not what rlft writes there"
        raise RunError(f"{exc.path} is damaged: {what}; restore it, or pass the adapter or checkpoint folder itself") \
            from None
    wrong = next((k for k, kind in (("stage", str), ("model", dict), ("data", dict), ("rewards", list),
                                    ("train", dict), ("lora", dict)) if data.get(k) is not None
                  and not isinstance(data[k], kind)), None)
    if wrong:
        raise RunError(f"{run_root / run_files.CONFIG} is damaged: {wrong} is not what rlft writes there; restore it, "
                       f"or pass the adapter or checkpoint folder itself")
    return data


def run_model_name(run_root: Path | None) -> str | None:
    """`model.name_or_path` as the run's config.yaml states it (as the user gave it)."""
    name = (run_config(run_root).get("model") or {}).get("name_or_path")
    return name if isinstance(name, str) else None


def adapter_config(weights: Path) -> dict:
    """A PEFT adapter folder's adapter_config.json; a RunError naming it when it is not a JSON object."""
    path = weights / "adapter_config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = None
    if not isinstance(config, dict):
        raise RunError(f"{path} is damaged (not a JSON object): the adapter in {weights} cannot be loaded")
    return config
