"""completions.jsonl: one writer for every stage that samples, one row per completion (or episode):

    {"step", "prompt_id", "prompt", "completion", "rewards": {name: score}, "total",
     "advantage" (stages with one), "weight" (stages with one), ...extra fields}

A score of null means the reward gave no score. `monitor.log_completions` caps the rows per step
(completions, not groups; 0 = none, -1 = all); rows are written in the rollouts' prompt-major order.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["CompletionLog", "RewardLog"]


def _num(x) -> float | None:
    if x is None:
        return None
    x = float(x)
    return None if math.isnan(x) else round(x, 6)


class CompletionLog:
    def __init__(self, path: str | Path | None, limit: int = 4):
        self.path = Path(path) if path else None
        self.limit = limit  # completions per step; -1 = all, 0 = none

    @property
    def enabled(self) -> bool:
        return self.path is not None and self.limit != 0

    def rows_to_write(self, available: int) -> int:
        return 0 if not self.enabled else available if self.limit < 0 else min(self.limit, available)

    def write(self, step: int, prompt_ids: Sequence[Any], prompts: Sequence[str], completions: Sequence[str],
              rewards: Mapping[str, Sequence[float | None]], totals: Sequence[float | None],
              advantages: Sequence[float] | None = None, weights: Sequence[float] | None = None,
              extra: Mapping[str, Sequence[Any]] | None = None) -> int:
        """Append up to `limit` rows (all sequences are per completion, same length); returns the rows written."""
        n = self.rows_to_write(len(completions))
        if not n:
            return 0
        with open(self.path, "a") as f:
            for i in range(n):
                row = {"step": step, "prompt_id": prompt_ids[i], "prompt": prompts[i], "completion": completions[i],
                       "rewards": {name: _num(values[i]) for name, values in rewards.items()},
                       "total": _num(totals[i])}
                if advantages is not None:
                    row["advantage"] = _num(advantages[i])
                if weights is not None:
                    row["weight"] = _num(weights[i])
                for key, values in (extra or {}).items():
                    row[key] = values[i]
                f.write(json.dumps(row) + "\n")
        return n

    def write_rollouts(self, step: int, rollouts, scores, advantages=None, weights=None, extra=None) -> int:
        """`write` for a Rollouts + Scores pair (tensors of advantages/weights are accepted)."""
        tolist = lambda v: v.tolist() if hasattr(v, "tolist") else v  # noqa: E731
        return self.write(step, rollouts.row_prompt_ids(), rollouts.row_prompt_texts(), rollouts.completions,
                          scores.per_reward, scores.total, None if advantages is None else tolist(advantages),
                          None if weights is None else tolist(weights), extra)


def write_eval_samples(path: str | Path, step: int, prompts: Sequence[Any], samples: Sequence[Mapping]) -> None:
    """Append one evaluation's samples to `path` (the run's eval_completions.jsonl): `prompt_id` `eval-<i>` (the i-th
    evaluation prompt, the same at every evaluation, so the report lines one prompt's answers up across steps) and
    `split: eval`; a row some reward gave no score names those rewards in `reward_failures`."""
    from rlft.data.messages import as_text

    with open(path, "a") as f:
        for x in samples:
            i = int(x["prompt_index"])
            row = {"step": step, "prompt_id": f"eval-{i}", "prompt": as_text(prompts[i]), "completion": x["completion"],
                   "rewards": {name: _num(v) for name, v in (x.get("rewards") or {}).items()},
                   "total": _num(x.get("total")), "split": "eval"}
            failed = [name for name, v in (x.get("rewards") or {}).items() if _num(v) is None]
            if failed:  # the rewards that gave this sample no score (raised, timed out, returned no number)
                row["reward_failures"] = failed
            f.write(json.dumps(row) + "\n")


class RewardLog:
    """reward_logs.jsonl: per step and reward function, what the function printed or logged, its mean
    time per call (ms), the completions it left unscored and their error messages (the report's
    reward-logs tab). Rows come from `RewardSuite.pop_logs()`."""

    MAX_CHARS = 20000  # per row and field: a reward printing in a loop must not fill the disk

    def __init__(self, path: str | Path | None):
        self.path = Path(path) if path else None

    def write(self, step: int, rows: Sequence[Mapping[str, Any]]) -> int:
        if self.path is None or not rows:
            return 0
        with open(self.path, "a") as f:
            for row in rows:
                out = {"step": step, **row}
                for key in ("output", "error"):
                    text = out.get(key) or ""
                    if len(text) > self.MAX_CHARS:
                        out[key] = text[:self.MAX_CHARS] + f"\n... [{len(text) - self.MAX_CHARS} more characters]"
                out["ms"] = round(float(out.get("ms") or 0.0), 3)
                f.write(json.dumps(out) + "\n")
        return len(rows)
