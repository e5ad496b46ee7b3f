"""metrics.jsonl and the console line: one record per logged step, with stable key names."""

from __future__ import annotations

import json
import time
import math
from pathlib import Path

from transformers import TrainerCallback

from rlft.config.stages import SPECS

# TRL / transformers names -> rlft's names
RENAMES = {
    "completions/mean_length": "completion_length",
    "kl": "kl_policy_ref",
}
# keys every record of a stage carries, from its StageSpec
REQUIRED = {name: list(spec.metrics) for name, spec in SPECS.items()}


def is_eval(logs: dict) -> bool:
    return any(key.startswith("eval_") for key in logs)


def normalise(logs: dict, stage: str, nan=None) -> dict:
    """rlft's names for TRL's keys, every key of the stage's spec present, NaN written as `nan` (JSON null)."""
    out: dict = {}
    for key, value in logs.items():
        key = RENAMES.get(key, key) if RENAMES.get(key, key) not in logs else key
        if isinstance(value, float) and math.isnan(value):
            value = nan
        out[key] = value
    if is_eval(logs):  # evaluation records keep just their own eval_* keys
        return out
    for key in (SPECS[stage].metrics if stage in SPECS else ()):
        out.setdefault(key, None)  # every line has the same keys; null = not measured this step
    return out


def generation_of(step: int, steps_per_generation: int) -> dict:
    """The sampled batch (1-based) optimizer step `step` trained on, and whether an earlier step already trained
    on it (later substeps and epochs of one generation: the batch metrics are that generation's, not new)."""
    index = max(step - 1, 0)
    return {"generation": index // steps_per_generation + 1, "reused_generation": index % steps_per_generation != 0}


# Measured once per generated batch; with num_substeps > 1 the later substeps train on the same
# batch, so their records repeat its values rather than leaving gaps.
BATCH_KEYS = ("reward", "reward_std", "frac_constant_groups", "frac_unscored", "frac_truncated", "frac_reward_zero_std",
              "completion_length", "kl_policy_ref", "kl_coef", "groups_removed", "reward_version",
              "async/staleness_mean", "async/staleness_max", "async/behaviour_weight_mean")


def _is_batch_key(key: str) -> bool:
    return key in BATCH_KEYS or key.startswith("completions/") \
            or (key.startswith("rewards/") and not key.endswith("/errors"))


def eval_row(result: dict) -> dict:
    """One evaluation during training as a metrics row: eval_reward (mean@n), pass@n, the spread over prompts,
    each reward's mean and the samples it left unscored, an episode success rate."""
    logs = {"eval_reward": result.get("reward_mean")}
    for key, name in (("pass_at_k", "eval_pass_at_k"), ("prompt_std", "eval_prompt_std")):
        if result.get(key) is not None:
            logs[name] = result[key]
    logs.update({f"eval_rewards/{k}": v for k, v in (result.get("per_reward") or {}).items()})
    logs.update({f"eval_rewards/{k}/errors": v for k, v in (result.get("reward_failures") or {}).items()})
    if result.get("success_rate") is not None:
        logs["eval_success_rate"] = result["success_rate"]
    return logs


class MetricsWriter(TrainerCallback):
    """Appends each training log to metrics.jsonl (main process only)."""

    def __init__(self, path: Path, stage: str, console=None, health=None, steps_per_generation: int | None = None):
        self.path = Path(path)
        self.stage = stage
        self.steps_per_generation = steps_per_generation  # None: the stage samples no generations per step
        self.console = console
        self.health = health
        self._batch_metrics: dict = {}
        self._error_keys: set = set()

    def _carry_batch_metrics(self, record: dict) -> None:
        fresh = {k: v for k, v in record.items() if _is_batch_key(k) and v is not None}
        if "reward" in fresh:
            self._batch_metrics = fresh
        else:
            for k, v in self._batch_metrics.items():
                if record.get(k) is None:
                    record[k] = v
        self._error_keys.update(k for k in record if k.endswith("/errors"))
        for k in self._error_keys:  # error counts are per step, never repeated
            if record.get(k) is None:
                record[k] = 0.0

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or "train_runtime" in logs:
            return
        # every rank builds the record (logged metrics are already gathered) so health actions agree
        # across processes; only rank 0 writes files and the console
        main = state.is_world_process_zero
        # wall-clock time (unix seconds) and stage on every row, so runs and stages line up in time
        record = {"step": state.global_step, "time": round(time.time(), 3), "stage": self.stage,
                  **normalise(logs, self.stage)}
        if not is_eval(logs):  # an evaluation row holds its own numbers only
            self._carry_batch_metrics(record)
        if self.steps_per_generation and not is_eval(logs):
            record.update(generation_of(state.global_step, self.steps_per_generation))
        if main:
            with open(self.path, "a") as f:
                f.write(json.dumps(record) + "\n")
            if self.console is not None:
                self.console.on_metrics(record)
        if self.health is not None:
            # the file says null for NaN (JSON has no NaN), but the health rules must see the NaN itself:
            # a null loss means "not measured", a NaN loss means the run is broken
            nans = {k: v for k, v in normalise(logs, self.stage, nan=math.nan).items()
                    if isinstance(v, float) and math.isnan(v)}
            self.health.check({**record, **nans}, control, write=main)
