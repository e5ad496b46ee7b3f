"""AWR's decision about one round of scored samples: each one's advantage and weight (rlft.algos) and the
round's metrics; the loop around it is rlft/stages/common/sampled_sft.py."""

from __future__ import annotations

import torch

from rlft.algos import awr_advantages, awr_metrics, awr_weights
from rlft.errors import RunError
from rlft.stages.awr.spec import AWRConfig
from rlft.stages.common.rounds import row_totals, sampled_metrics


def awr_decide(rows: list[dict], a: AWRConfig, round_: int) -> tuple[list[dict], dict]:
    """Rows with `advantage` (total − baseline, before normalisation) and `weight`, and the metrics."""
    totals = row_totals(rows)
    adv = awr_advantages(totals, a.num_samples_per_prompt, a.baseline)
    valid = torch.isfinite(totals)
    w = awr_weights(adv, a.advantage_beta, a.clip_advantage, a.normalize_advantage, valid=valid)
    decided = [{**r, "advantage": round(adv[i].item(), 6) if valid[i] else None, "weight": round(w[i].item(), 6)}
               for i, r in enumerate(rows)]
    m = sampled_metrics(rows, round_)
    m.update(awr_metrics(adv, w, a.clip_advantage, valid=valid))
    if not bool(valid.any()):
        raise RunError(f"AWR: no sampled completion got a score ({len(rows)} sampled); check the rewards.")
    return decided, m
