"""What a resume may change: the keys that break a run's checkpoints (refused), the keys free to change (how far
to train, how often to save and log), and the leaf-by-leaf difference between a run's saved config.yaml and the
config it resumes with. Both `--resume` (runtime/resume_config.py) and a bare `--resume`'s search for the newest
matching run (prepare.py) read it; no torch."""

from __future__ import annotations

from pathlib import Path

from rlft.config.compose import flatten
from rlft.config.run_config import RunConfigError, read_run_config
from rlft.config.schema import RlftConfig, config_key

# keys whose change makes a checkpoint meaningless (shapes, data order, the objective); each stage's
# own keys come from its StageSpec.resume_breaking
RESUME_BREAKING = ("stage", "model.name_or_path", "lora.r", "lora.lora_alpha", "lora.target_modules", "lora.enabled",
                   "train.per_device_train_batch_size", "train.gradient_accumulation_steps", "train.seed",
                   "data.train", "hw.num_processes", "train.optim")

# keys a resume may change without --allow-config-change: where the run folder is, how far to train,
# how often to save and log
RESUME_FREE = ("train.output_dir", "train.max_steps", "train.save_steps", "train.save_total_limit",
               "train.logging_steps")
RESUME_FREE_SECTIONS = ("slurm",)  # how the job is scheduled, not what it trains


def saved_config(root: Path) -> dict | None:
    """A run folder's config.yaml as a dict (None when missing, empty or unreadable)."""
    try:
        return read_run_config(root, empty_ok=False)
    except RunConfigError:
        return None


def config_changes(old: dict, cfg: RlftConfig) -> list[tuple[str, object, object]]:
    """(key, saved value, new value) for each setting that differs from a run's saved config. Left out:
    RESUME_FREE keys, other stages' sections, keys the saved config predates (at their default) or lost."""
    from rlft.config.schema import to_dict

    from rlft.config.schema import STAGES
    from rlft.config.stages import get_spec

    a, b = _leaves(old), _leaves(to_dict(cfg))
    other_sections = {get_spec(s).section for s in STAGES} - {get_spec(cfg.stage).section}
    out = []
    for key in sorted(set(a) | set(b), key=lambda k: (k.split(".")[0] == "rewards", k)):
        section = key.split(".", 1)[0]
        if key in RESUME_FREE or section in other_sections or section in RESUME_FREE_SECTIONS or key not in b:
            continue
        if key not in a and _plain(b[key]) == _plain(_schema_default(key)):
            continue  # a setting newer than the saved config, at its default
        if key == "model.init_from" and _same_path(a.get(key), b[key]):
            continue  # older rlft saved it as given (relative to the working folder); it is recorded absolute now
        if _plain(a.get(key)) != _plain(b[key]):
            out.append((key, a.get(key), b[key]))
    return out


def _same_path(a, b) -> bool:
    import os

    return isinstance(a, str) and isinstance(b, str) and bool(a) and os.path.abspath(a) == os.path.abspath(b)


def _leaves(data: dict) -> dict:
    """flatten(), with lists of sections (rewards) expanded by index: rewards.0.weight."""
    out = {}
    for key, value in flatten(data).items():
        if isinstance(value, dict) and value:
            continue
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            for i, item in enumerate(value):
                out.update(_leaves({f"{key}.{i}": item}))
            out[f"{key}.count"] = len(value)
            continue
        out[key] = value
    return out


_NO_DEFAULT = object()


def _schema_default(key: str):
    """The schema default of a dotted key (list indices skipped), or a sentinel when it has none."""
    import dataclasses
    import typing

    cls, parts = RlftConfig, [p for p in key.split(".") if not p.isdigit()]
    for i, part in enumerate(parts):
        if not dataclasses.is_dataclass(cls):
            return _NO_DEFAULT
        fields = {config_key(f.name): f for f in dataclasses.fields(cls)}
        if part not in fields:
            return _NO_DEFAULT
        if i == len(parts) - 1:
            f = fields[part]
            if f.default is not dataclasses.MISSING:
                return f.default
            return f.default_factory() if f.default_factory is not dataclasses.MISSING else _NO_DEFAULT
        hint = typing.get_type_hints(cls)[fields[part].name]
        cls = typing.get_args(hint)[0] if typing.get_origin(hint) is list else hint
    return _NO_DEFAULT


def _plain(value):
    if isinstance(value, tuple):
        value = list(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value
