"""Which options each TRL trainer config accepts, read from the installed sources with `ast`.

`validate-config` must not import TRL (seconds of start-up), yet the `trl:` passthrough section
should be checked against the installed version's real fields. Parsing the dataclass sources
gives exactly that in milliseconds.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from functools import lru_cache
from pathlib import Path

from rlft.config.stages import SPECS

PARENTS = {
    "_BaseConfig": ("trl", "trainer/base_config.py"),
    "TrainingArguments": ("transformers", "training_args.py"),
}

# TRL options that rlft sets from its own keys (the passthrough must not fight them).
_COMMON = {
    "learning_rate": "train.learning_rate", "per_device_train_batch_size": "train.per_device_train_batch_size",
    "gradient_accumulation_steps": "train.gradient_accumulation_steps", "max_steps": "train.max_steps",
    "num_train_epochs": "train.num_train_epochs", "lr_scheduler_type": "train.lr_scheduler_type",
    "warmup_ratio": "train.warmup_ratio", "weight_decay": "train.weight_decay", "max_grad_norm": "train.max_grad_norm",
    "bf16": "train.bf16", "fp16": "train.fp16", "tf32": "train.tf32", "seed": "train.seed",
    "gradient_checkpointing": "train.gradient_checkpointing", "output_dir": "train.output_dir",
    "logging_steps": "train.logging_steps", "save_steps": "train.save_steps",
    "save_total_limit": "train.save_total_limit", "optim": "train.optim", "report_to": "train.report_to",
    "eval_steps": "train.eval_steps", "dataloader_num_workers": "train.dataloader_num_workers",
    "warmup_steps": "train.warmup_ratio", "data_seed": "train.seed", "use_cpu": "hw.device",
}


def modeled_by_rlft(stage: str) -> dict[str, str]:
    """TRL option -> the rlft key that sets it, for `stage` (common train.* keys + its StageSpec's)."""
    spec = SPECS.get(stage)
    return {**_COMMON, **(spec.modeled() if spec else {})}


def config_source(stage: str) -> tuple[str, str, str] | None:
    """(top package, module file relative to it, class) of the stage's TRL config, from its StageSpec."""
    spec = SPECS.get(stage)
    if spec is None or not spec.trl_config:
        return None
    module, _, cls = spec.trl_config.partition(":")
    package, _, rest = module.partition(".")
    return package, rest.replace(".", "/") + ".py", cls


def _source(package: str, rel: str) -> Path | None:
    spec = importlib.util.find_spec(package)  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / rel
    return path if path.is_file() else None


def _class_fields(path: Path, name: str) -> tuple[set[str], list[str]]:
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            names = {s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
            bases = [b.id for b in node.bases if isinstance(b, ast.Name)]
            return names, bases
    return set(), []


@lru_cache(maxsize=None)
def trainer_config_fields(stage: str) -> frozenset[str] | None:
    """Field names of the TRL config class behind `stage` (with parents), or None if unknown."""
    source = config_source(stage)
    if source is None:
        return None
    package, rel, cls = source
    out: set[str] = set()
    todo = [(package, rel, cls)]
    while todo:
        package, rel, cls = todo.pop()
        path = _source(package, rel)
        if path is None:
            return None
        names, bases = _class_fields(path, cls)
        out |= names
        todo += [(*PARENTS[b], b) for b in bases if b in PARENTS]
    return frozenset(out) if out else None


def rlft_keys_in(message: str, args: dict, cfg) -> list[str]:
    """The rlft keys behind the TRL options a TRL error message names (`args`: the options given, `cfg`: the
    RlftConfig): `trl.X` for passthrough options first (the likeliest culprit), then the rlft keys mapped onto
    TRL's options."""
    modeled = modeled_by_rlft(cfg.stage)
    named = [k for k in sorted(args, key=len, reverse=True) if re.search(rf"(?<![\w.]){re.escape(k)}(?!\w)", message)]
    passthrough = [f"trl.{k}" for k in named if k in cfg.trl]
    mapped = [modeled[k] for k in named if k not in cfg.trl and k in modeled]
    return list(dict.fromkeys(passthrough + mapped))
