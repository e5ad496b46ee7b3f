"""Which options each TRL trainer config accepts, and the types and choices it declares for them, read from the
installed sources with `ast`.

`validate-config` must not import TRL (seconds of start-up), yet the `trl:` passthrough section
should be checked against the installed version's real fields. Parsing the dataclass sources
gives exactly that in milliseconds: each field's annotation as written (`int | None`) and the `choices` of its
`metadata`, checked against a `trl:` value by `value_problem`. A range TRL does not declare (`top_k: -1`) is
caught where the library first uses the value (rlft.runtime.context maps it onto the key).
"""

from __future__ import annotations

import ast
import difflib
import importlib.util
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

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


@dataclass(frozen=True)
class TrlField:
    """One field of a TRL trainer config as its source declares it: the annotation as written and the
    `metadata={"choices": [...]}` values, when it lists them."""
    annotation: str
    choices: tuple | None = None
    owner: str = ""  # the class that declares it (GRPOConfig, TrainingArguments), for messages


def _choices(value: ast.expr | None) -> tuple | None:
    """`field(..., metadata={"choices": [...]})`'s choices, when they are literals."""
    if not (isinstance(value, ast.Call) and getattr(value.func, "id", None) == "field"):
        return None
    for kw in value.keywords:
        if kw.arg == "metadata" and isinstance(kw.value, ast.Dict):
            for k, v in zip(kw.value.keys, kw.value.values):
                if isinstance(k, ast.Constant) and k.value == "choices":
                    try:
                        return tuple(ast.literal_eval(v))
                    except ValueError:
                        return None
    return None


def _class_fields(path: Path, name: str) -> tuple[dict[str, TrlField], list[str]]:
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            fields = {s.target.id: TrlField(ast.unparse(s.annotation), _choices(s.value), name) for s in node.body
                      if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
            bases = [b.id for b in node.bases if isinstance(b, ast.Name)]
            return fields, bases
    return {}, []


@lru_cache(maxsize=None)
def trainer_config_types(stage: str) -> dict[str, TrlField] | None:
    """Each field of the TRL config class behind `stage` (with parents; a subclass's declaration wins), or None
    if unknown."""
    source = config_source(stage)
    if source is None:
        return None
    package, rel, cls = source
    out: dict[str, TrlField] = {}
    todo = [(package, rel, cls)]
    while todo:
        package, rel, cls = todo.pop(0)
        path = _source(package, rel)
        if path is None:
            return None
        fields, bases = _class_fields(path, cls)
        for key, field in fields.items():
            out.setdefault(key, field)
        todo += [(*PARENTS[b], b) for b in bases if b in PARENTS]
    return out or None


@lru_cache(maxsize=None)
def trainer_config_fields(stage: str) -> frozenset[str] | None:
    """Field names of the TRL config class behind `stage` (with parents), or None if unknown."""
    types = trainer_config_types(stage)
    return frozenset(types) if types else None


_SEQUENCES = {"list", "List", "tuple", "Tuple", "Sequence"}
_MAPPINGS = {"dict", "Dict", "Mapping"}


def _fits(node: ast.expr, value: Any) -> bool:
    """Whether `value` (as YAML gives it) is of the annotation `node`; a name this cannot judge (an enum, a
    class of the library) accepts anything, so the check never refuses what TRL would take."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _fits(node.left, value) or _fits(node.right, value)
    if isinstance(node, ast.Constant):
        return node.value is None and value is None
    if isinstance(node, ast.Name):
        name = node.id
        if name == "None":
            return value is None
        if name == "bool":
            return isinstance(value, bool)
        if name == "int":
            return isinstance(value, int) and not isinstance(value, bool)
        if name == "float":
            return isinstance(value, (int, float)) and not isinstance(value, bool)
        if name == "str":
            return isinstance(value, str)
        if name in _SEQUENCES:
            return isinstance(value, list)
        if name in _MAPPINGS:
            return isinstance(value, dict)
        return True
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
        base = node.value.id
        args = list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]
        if base in ("Optional", "Union"):
            return (base == "Optional" and value is None) or any(_fits(a, value) for a in args)
        if base == "Literal":
            return any(isinstance(a, ast.Constant) and type(a.value) is type(value) and a.value == value
                       for a in args)
        if base in _SEQUENCES:
            return isinstance(value, list) and (base not in ("list", "List", "Sequence")
                                                or all(_fits(args[0], v) for v in value))
        if base in _MAPPINGS:
            return isinstance(value, dict)
    return True


def value_problem(field: TrlField, value: Any) -> str | None:
    """Why `value` does not fit the TRL field as TRL declares it (its annotation, its `choices`), or None."""
    try:
        node = ast.parse(field.annotation, mode="eval").body
    except SyntaxError:
        return None
    if not _fits(node, value):
        got = "null" if value is None else f"{type(value).__name__} `{value}`"
        return f"TRL's {field.owner} declares it `{field.annotation}`, got {got}"
    if field.choices and value is not None and value not in field.choices:
        allowed = ", ".join(map(str, field.choices))
        close = difflib.get_close_matches(str(value), [str(c) for c in field.choices], n=1)
        hint = f"; did you mean `{close[0]}`?" if close else ""
        return f"`{value}` is not one of TRL's {field.owner} choices ({allowed}){hint}"
    return None


def keys_named_in(message: str, options) -> list[str]:
    """The options (longest first) that `message` names as whole words (`top_k`, not `min_top_k` or `x.top_k`)."""
    return [k for k in sorted(options, key=len, reverse=True)
            if re.search(rf"(?<![\w.]){re.escape(k)}(?!\w)", message)]


def rlft_keys_in(message: str, args: dict, cfg) -> list[str]:
    """The rlft keys behind the TRL options a TRL error message names (`args`: the options given, `cfg`: the
    RlftConfig): `trl.X` for passthrough options first (the likeliest culprit), then the rlft keys mapped onto
    TRL's options."""
    modeled = modeled_by_rlft(cfg.stage)
    named = keys_named_in(message, args)
    passthrough = [f"trl.{k}" for k in named if k in cfg.trl]
    mapped = [modeled[k] for k in named if k not in cfg.trl and k in modeled]
    return list(dict.fromkeys(passthrough + mapped))
