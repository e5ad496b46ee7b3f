"""Which options each TRL trainer config accepts, read from the installed sources with `ast`.

`validate-config` must not import TRL (seconds of start-up), yet the `trl:` passthrough section
should be checked against the installed version's real fields. Parsing the dataclass sources
gives exactly that in milliseconds.
"""

from __future__ import annotations

import ast
import importlib.util
from functools import lru_cache
from pathlib import Path

# stage -> (package, module file relative to it, class name); parents are followed by name.
TRAINER_CONFIGS = {
    "grpo": ("trl", "trainer/grpo_config.py", "GRPOConfig"),
    "dpo": ("trl", "trainer/dpo_config.py", "DPOConfig"),
    "orpo": ("trl", "experimental/orpo/orpo_config.py", "ORPOConfig"),
    "rs_sft": ("trl", "trainer/sft_config.py", "SFTConfig"),
    "awr": ("trl", "trainer/sft_config.py", "SFTConfig"),
}
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
_STAGE = {
    "grpo": {"num_generations": "grpo.group_size", "temperature": "grpo.temperature", "top_p": "grpo.top_p",
             "max_completion_length": "grpo.max_tokens", "beta": "grpo.kl_penalty_coef",
             "epsilon": "grpo.clip_range", "num_iterations": "grpo.ppo_epochs",
             "steps_per_generation": "grpo.num_substeps", "scale_rewards": "grpo.baseline_mode",
             "reward_weights": "rewards[].weight"},
    "dpo": {"beta": "dpo.beta", "label_smoothing": "dpo.label_smoothing", "max_length": "dpo.max_length",
            "loss_type": "dpo.loss_type"},
    "orpo": {"beta": "orpo.beta", "max_length": "orpo.max_length", "max_prompt_length": "orpo.max_prompt_length"},
}


def modeled_by_rlft(stage: str) -> dict[str, str]:
    return {**_COMMON, **_STAGE.get(stage, {})}


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
    if stage not in TRAINER_CONFIGS:
        return None
    package, rel, cls = TRAINER_CONFIGS[stage]
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
