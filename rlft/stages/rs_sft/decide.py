"""RS-SFT's decision about one round of scored samples: which to keep (rlft.algos.keep_mask) and the round's
metrics; the loop around it is rlft/stages/common/sampled_sft.py."""

from __future__ import annotations

import statistics

from rlft.algos import keep_mask
from rlft.errors import RunError
from rlft.stages.common.rounds import row_totals, sampled_metrics, scored_totals
from rlft.stages.rs_sft.spec import RSSFTConfig


def rs_sft_decide(rows: list[dict], rs: RSSFTConfig, round_: int) -> tuple[list[dict], dict]:
    """Rows with `kept`, and the round's metrics. No sample above the threshold: RunError (exit 2)."""
    keep = keep_mask(row_totals(rows), rs.num_samples_per_prompt, rs.keep, rs.reward_threshold, rs.max_samples).tolist()
    decided = [{**r, "kept": k} for r, k in zip(rows, keep)]
    kept_totals = [float(r["total"]) for r in decided if r["kept"]]
    m = sampled_metrics(rows, round_)
    m.update(kept_count=len(kept_totals), kept_fraction=len(kept_totals) / len(rows) if rows else 0.0,
             kept_reward_mean=statistics.fmean(kept_totals) if kept_totals else None)
    if not kept_totals:
        totals = scored_totals(rows)
        spread = (f"min {min(totals):.4g}, median {statistics.median(totals):.4g}, max {max(totals):.4g} "
                  f"over {len(totals)} scored samples") if totals else "no sample got a score"
        raise RunError(f"RS-SFT round {round_}: no sample's total reward is above rs_sft.reward_threshold "
                       f"({rs.reward_threshold}): {spread}. Nothing to train on; lower rs_sft.reward_threshold, "
                       f"sample more (rs_sft.num_samples_per_prompt) or check the rewards. The samples are kept in "
                       f"samples.jsonl.")
    return decided, m
