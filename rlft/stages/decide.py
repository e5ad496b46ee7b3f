"""What RS-SFT and AWR decide about one round of scored samples, over plain samples.jsonl rows:
RS-SFT's keep rule and AWR's advantages and weights (the math is in rlft.algos), the round's
metrics, and the training pairs that follow."""

from __future__ import annotations

import math
import statistics

import torch

from rlft.algos import awr_advantages, awr_metrics, awr_weights, keep_mask
from rlft.stages.awr.spec import AWRConfig
from rlft.stages.rs_sft.spec import RSSFTConfig
from rlft.errors import RunError


def _totals(rows: list[dict]) -> torch.Tensor:
    return torch.tensor([math.nan if r.get("total") is None else float(r["total"]) for r in rows], dtype=torch.float64)


def _scored(rows: list[dict]) -> list[float]:
    return [float(r["total"]) for r in rows if r.get("total") is not None]


def sampled_metrics(rows: list[dict], round_: int) -> dict:
    totals = _scored(rows)
    return {"round": round_, "num_sampled": len(rows),
            "sampled_reward_mean": statistics.fmean(totals) if totals else None,
            "sampled_reward_std": statistics.pstdev(totals) if totals else None,
            "frac_unscored": 1 - len(totals) / len(rows) if rows else None,
            "frac_truncated": _truncated(rows)}


def _truncated(rows: list[dict]) -> float | None:
    """Share of the samples cut at max_tokens without an EOS (`finished` False); rows without the flag (a
    samples.jsonl from before it was recorded) are not counted."""
    flags = [r["finished"] for r in rows if isinstance(r.get("finished"), bool)]
    return sum(not f for f in flags) / len(flags) if flags else None


def rs_sft_decide(rows: list[dict], rs: RSSFTConfig, round_: int) -> tuple[list[dict], dict]:
    """Rows with `kept`, and the round's metrics. No sample above the threshold: RunError (exit 2)."""
    keep = keep_mask(_totals(rows), rs.num_samples_per_prompt, rs.keep, rs.reward_threshold, rs.max_samples).tolist()
    decided = [{**r, "kept": k} for r, k in zip(rows, keep)]
    kept_totals = [float(r["total"]) for r in decided if r["kept"]]
    m = sampled_metrics(rows, round_)
    m.update(kept_count=len(kept_totals), kept_fraction=len(kept_totals) / len(rows) if rows else 0.0,
             kept_reward_mean=statistics.fmean(kept_totals) if kept_totals else None)
    if not kept_totals:
        totals = _scored(rows)
        spread = (f"min {min(totals):.4g}, median {statistics.median(totals):.4g}, max {max(totals):.4g} "
                  f"over {len(totals)} scored samples") if totals else "no sample got a score"
        raise RunError(f"RS-SFT round {round_}: no sample's total reward is above rs_sft.reward_threshold "
                       f"({rs.reward_threshold}): {spread}. Nothing to train on; lower rs_sft.reward_threshold, "
                       f"sample more (rs_sft.num_samples_per_prompt) or check the rewards. The samples are kept in "
                       f"samples.jsonl.")
    return decided, m


def awr_decide(rows: list[dict], a: AWRConfig, round_: int) -> tuple[list[dict], dict]:
    """Rows with `advantage` (total − baseline, before normalisation) and `weight`, and the metrics."""
    totals = _totals(rows)
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


def _pair(row: dict) -> dict:
    """A prompt/completion example in TRL's format: text, or chat messages with an assistant reply."""
    prompt = row["prompt"]
    if isinstance(prompt, list):
        return {"prompt": prompt, "completion": [{"role": "assistant", "content": row["completion"]}]}
    return {"prompt": prompt, "completion": row["completion"]}


def training_pairs(decided: list[dict]) -> list[dict]:
    """RS-SFT: the kept rows; AWR: every scored row with its weight."""
    out = []
    for r in decided:
        if "kept" in r and r["kept"]:
            out.append(_pair(r))
        elif "weight" in r and r.get("advantage") is not None:
            out.append({**_pair(r), "weight": float(r["weight"])})
    return out
