"""Scoring rollouts with the configured rewards, through rlft's safe reward calling
(`rlft.rewards.safe.RewardSuite`: failures become "no score", are counted, and the failure-fraction
guard stops a run that is learning from noise)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rlft.data.messages import as_text
from rlft.rewards.safe import ROW_ID_COLUMNS as ID_COLUMNS
from rlft.rewards.safe import RewardSuite

__all__ = ["ID_COLUMNS", "Scores", "score", "score_texts"]


@dataclass
class Scores:
    """Per completion (B rows, the rollouts' order): each reward's score and the weighted total;
    None = no score (the function failed, or a weighted function failed for the total)."""
    names: list[str]
    per_reward: dict[str, list[float | None]]
    total: list[float | None]

    def __len__(self) -> int:
        return len(self.total)

    @property
    def valid(self) -> list[bool]:
        return [t is not None for t in self.total]

    def total_tensor(self, device=None):
        """Totals as a float tensor (NaN = no score)."""
        import torch

        return torch.tensor([math.nan if t is None else t for t in self.total], dtype=torch.float32, device=device)

    def per_reward_tensor(self, device=None):
        """(B, F) float32 tensor of each reward's scores (NaN = no score), columns in `names` order."""
        import torch

        rows = [[math.nan if self.per_reward[name][i] is None else self.per_reward[name][i] for name in self.names]
                for i in range(len(self.total))]
        return torch.tensor(rows, dtype=torch.float32, device=device).reshape(len(self.total), len(self.names))


def score_texts(suite: RewardSuite, prompts: Sequence[Any], completions: Sequence[Any],
                columns: Mapping[str, Sequence[Any]] | None = None, *, count: bool = True) -> Scores:
    """Score B (prompt, completion) pairs; `columns` holds B values per extra dataset column (passed to
    the reward functions as keyword arguments; `ID_COLUMNS` are left out). With `count=False` the
    suite's failure guard is left to the caller (a multi-process trainer counts gathered totals once,
    so every rank stops together)."""
    columns = {k: list(v) for k, v in (columns or {}).items()}  # the suite leaves out ID_COLUMNS
    out = suite.score([as_text(p) for p in prompts], [as_text(c) for c in completions], columns, count=count)
    return Scores(names=suite.names, per_reward=out.per_fn, total=out.total)


def sampled_columns(rollouts) -> dict[str, list]:
    """What the sampler knows of each completion, for the rewards that name it (`SAMPLED_COLUMNS`): its token
    count (EOS included) and the budget it was sampled under."""
    mask = getattr(rollouts, "completion_mask_BT", None)
    if mask is None:  # completions known as text alone
        return {}
    out: dict[str, list] = {"completion_lengths": [int(n) for n in mask.sum(dim=1).tolist()]}
    if getattr(rollouts, "max_new_tokens", None) is not None:
        out["max_tokens"] = [int(rollouts.max_new_tokens)] * len(rollouts)
    return out


def score(rollouts, suite: RewardSuite, columns: Mapping[str, Sequence[Any]] | None = None, *,
          count: bool = True) -> Scores:
    """Score every completion of `rollouts`. `columns` holds one value per *prompt* for each extra
    dataset column (e.g. the reference answer); each completion gets its prompt's value."""
    index = rollouts.prompt_index
    per_row = {}
    for key, values in (columns or {}).items():
        values = list(values)
        if len(values) != rollouts.num_prompts:
            raise ValueError(f"column {key!r} has {len(values)} values for {rollouts.num_prompts} prompts")
        per_row[key] = [values[i] for i in index]
    per_row.update(sampled_columns(rollouts))
    return score_texts(suite, rollouts.row_prompt_texts(), rollouts.completions, per_row, count=count)
