"""The files rlft reads and writes in a checkpoint beyond what transformers saves there: whether a marked checkpoint
is whole (each file read the way a resume reads it), its rlft_state.json, and the marker written last."""

from __future__ import annotations

import json
import math
from pathlib import Path

from rlft import run_files
from rlft.rundir.folder import COMPLETE_MARKER, checkpoint_step
from rlft.config.run_config import json_kind

RLFT_STATE = run_files.RLFT_STATE


def _safetensors_problem(path: Path) -> str | None:
    """A safetensors file is an 8-byte header length, a JSON header, then the tensors it lists."""
    import struct

    size = path.stat().st_size
    try:
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            if n > size:
                raise ValueError
            header = json.loads(f.read(n))
    except (struct.error, ValueError, UnicodeDecodeError):
        return f"{path.name} is truncated or not safetensors ({size} bytes)"
    end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
    if 8 + n + end > size:
        return f"{path.name} is truncated ({size} of {8 + n + end} bytes)"
    return None


def _torch_file_problem(path: Path) -> str | None:
    """torch.save writes a zip archive; a truncated one has lost its central directory."""
    import zipfile

    with open(path, "rb") as f:
        magic = f.read(2)
    if magic != b"PK":  # torch.save has written zip archives since torch 1.6; anything else is not one of its files
        return (f"{path.name} is empty or truncated" if path.stat().st_size < 2
                else f"{path.name} is not a torch.save archive ({path.stat().st_size} bytes)")
    try:
        zipfile.ZipFile(path).close()
    except (zipfile.BadZipFile, OSError):
        return f"{path.name} is truncated ({path.stat().st_size} bytes)"
    return None


WEIGHT_FILES = ("adapter_model.safetensors", "model.safetensors", "model.safetensors.index.json", "adapter_model.bin",
                "pytorch_model.bin", "pytorch_model.bin.index.json")


def _read_json(path: Path) -> tuple[object, str | None]:
    """(data, None), or (None, why it cannot be read)."""
    try:
        return json.loads(path.read_text(encoding="utf-8")), None
    except (OSError, ValueError):  # UnicodeDecodeError is a ValueError
        return None, f"{path.name} is not valid JSON"


def _fits(value, hint) -> bool:
    """Whether a JSON value fits a dataclass field's type hint (int, float, bool, str, list[...], dict[...],
    X | None)."""
    import types
    import typing

    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, a) for a in args)
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint in (int, float):
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        return number and (hint is float or (math.isfinite(value) and float(value).is_integer()))
    if hint is str:
        return isinstance(value, str)
    if origin is list or hint is list:
        return isinstance(value, list) and all(_fits(v, args[0]) for v in value) if args else isinstance(value, list)
    if origin is dict or hint is dict:
        return isinstance(value, dict)
    return True  # a type JSON cannot hold: transformers rebuilds it


def _trainer_state_problem(path: Path, step: int, load: bool = True) -> str | None:
    """What in trainer_state.json would stop transformers' TrainerState from loading it or training on from it
    (`load=False`: its fields' types are not checked against TrainerState's)."""
    data, problem = _read_json(path)
    if problem:
        return problem
    if not isinstance(data, dict):
        return f"{path.name} holds {json_kind(data)}, not an object"
    return (_trainer_state_fields_problem(path, data) if load else None) or _global_step_problem(path, data, step)


def _global_step_problem(path: Path, data: dict, step: int) -> str | None:
    if type(data.get("global_step")) is not int or data["global_step"] != step:
        return f"{path.name} says global_step {data.get('global_step')!r} in checkpoint-{step}"
    return None


def _trainer_state_fields_problem(path: Path, data: dict) -> str | None:
    import dataclasses
    import typing

    from transformers import TrainerState

    hints = typing.get_type_hints(TrainerState)
    known = {f.name for f in dataclasses.fields(TrainerState)}
    unknown = sorted(set(data) - known)
    if unknown:
        return f"{path.name} has keys TrainerState does not know: {', '.join(unknown[:5])}"
    for name in sorted(data):
        # stateful_callbacks is a list of callbacks in memory and a {name: state} object in the file
        hint = dict | None if name == "stateful_callbacks" else hints[name]
        value = data[name]
        if not _fits(value, hint):
            shown = f" {value!r:.40}" if isinstance(value, (str, int, float)) and not isinstance(value, bool) else ""
            wanted = getattr(hint, "__name__", None) if isinstance(hint, type) and not typing.get_args(hint) else hint
            return f"{path.name}: {name} is {json_kind(value)}{shown}, not {wanted or hint}"
    return None


def _rng_state_problem(path: Path) -> str | None:
    """An RNG state file loads the way transformers loads it and each generator accepts its state."""
    import random

    import numpy as np
    import torch
    from transformers.trainer_pt_utils import safe_globals

    try:
        with safe_globals():
            state = torch.load(path, weights_only=True)
        random.Random().setstate(state["python"])
        np.random.RandomState().set_state(state["numpy"])
        torch.Generator().set_state(state["cpu"])
    except Exception as exc:  # noqa: BLE001 - unpickling, a missing key or a generator's refusal: all mean damaged
        return f"{path.name} does not load ({type(exc).__name__})"
    return None


def _optimizer_files_problem(folder: Path) -> str | None:
    """optimizer.pt and scheduler.pt hold the state dicts torch's load_state_dict reads (memory-mapped: an
    optimizer's tensors are not read here)."""
    import torch

    for name in ("optimizer.pt", "scheduler.pt"):
        path = folder / name
        if not path.is_file():
            continue
        try:
            state = torch.load(path, weights_only=True, mmap=True, map_location="cpu")
        except Exception as exc:  # noqa: BLE001 - whatever unpickling raises, the file does not load
            return f"{name} does not load ({type(exc).__name__})"
        groups = state.get("param_groups") if isinstance(state, dict) else None
        if not isinstance(state, dict) or name == "optimizer.pt" and not (
                isinstance(state.get("state"), dict) and isinstance(groups, list)
                and all(isinstance(g, dict) and isinstance(g.get("params"), list) for g in groups)):
            return f"{name} does not hold {'an optimizer' if name == 'optimizer.pt' else 'a scheduler'} state"
    return None


def rlft_state_problem(path: Path) -> str | None:
    """rlft_state.json is an object whose parts RunContext and the stages read before the trainer loads it
    are objects. Whether it holds every key the trainer writes is checked at load (`saved_state.state_problem`)."""
    if not path.is_file():
        return None
    data, problem = _read_json(path)
    if problem:
        return problem
    if not isinstance(data, dict):
        return f"{path.name} holds {json_kind(data)}, not an object"
    for key in ("kl_controller", "trainer"):
        if key in data and not isinstance(data[key], dict):
            return f"{path.name}: {key} is {json_kind(data[key])}, not an object"
    start = data.get("trainer", {}).get("eval_start")
    if start is not None and not isinstance(start, dict):
        return f"{path.name}: trainer.eval_start is {json_kind(start)}, not an object"

    problem = eval_result_problem(start) if start is not None else None
    return f"{path.name}: trainer.eval_start {problem}" if problem else None


def checkpoint_problem(path: Path, *, load: bool = True) -> str | None:
    """Why a marked checkpoint cannot be resumed from (missing, truncated or damaged files), or None if it looks
    whole: every file a resume loads is read here the way the trainer reads it, before anything is trained.
    `load=False` leaves out the checks that need torch and transformers (loading RNG and optimizer states,
    TrainerState's field types): the files' structure only."""
    state = path / "trainer_state.json"
    if not state.is_file():
        return "trainer_state.json is missing"
    problem = _trainer_state_problem(state, checkpoint_step(path), load)
    if problem:
        return problem
    if not any((path / name).is_file() for name in WEIGHT_FILES) and not any(path.glob("pytorch_model_fsdp*")):
        return "it holds no model weights"
    for file in sorted(path.glob("*.safetensors")):
        problem = _safetensors_problem(file)
        if problem:
            return problem
    for file in sorted([*path.glob("*.pt"), *path.glob("*.pth"), *path.glob("*.bin")]):
        problem = _torch_file_problem(file)
        if problem:
            return problem
    for file in sorted(path.glob("rng_state*.pth")) if load else ():
        problem = _rng_state_problem(file)
        if problem:
            return problem
    return (_optimizer_files_problem(path) if load else None) or rlft_state_problem(path / RLFT_STATE)


def read_rlft_state(path: Path) -> dict:
    """A checkpoint's rlft_state.json ({} when absent); call after `checkpoint_problem` passed."""
    state = path / RLFT_STATE
    return json.loads(state.read_text(encoding="utf-8")) if state.is_file() else {}


def seal_checkpoint(path: Path, state: dict) -> None:
    """rlft's state, then the completion marker, last: a resume only trusts marked checkpoints."""
    (path / RLFT_STATE).write_text(json.dumps(state))
    (path / COMPLETE_MARKER).write_text("ok\n")


def _kind(value) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", float: "a number", int: "a number",
            type(None): "null"}.get(type(value), type(value).__name__)


def eval_result_problem(result) -> str | None:
    """What makes a stored evaluation result (an eval start kept in a checkpoint for a resume) other than what
    `evaluate` returns: a part that is not an object, a mean that is not a number, a count that is not one; None
    when it reads as one. Said after the file's name by the caller."""
    if not isinstance(result, dict):
        return f"is {_kind(result)}, not an object"
    for key in ("reward_mean", "pass_at_k", "prompt_std", "success_rate", "episode_length", "preference_accuracy"):
        value = result.get(key)
        if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool)):
            return f"{key} is {_kind(value)}, not a number"
    for key in ("n", "k", "prompts", "unscored"):
        value = result.get(key)
        if value is not None and (type(value) is not int or value < 0):
            return f"{key} is {_kind(value)} {value!r:.20}, not a count"
    for key in ("per_reward", "reward_failures", "sampling"):
        if key in result and not isinstance(result[key], dict):
            return f"{key} is {_kind(result[key])}, not an object"
    return None
