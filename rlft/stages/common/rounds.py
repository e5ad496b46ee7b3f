"""A round of RS-SFT or AWR scored samples, over plain samples.jsonl rows: the totals, the round's sampled
metrics, and the training pairs that follow the stage's decision (rlft/stages/rs_sft/decide.py: the keep rule;
rlft/stages/awr/decide.py: advantages and weights)."""

from __future__ import annotations

import math
import statistics

import torch


def row_totals(rows: list[dict]) -> torch.Tensor:
    """Each row's total reward, NaN where it got no score."""
    return torch.tensor([math.nan if r.get("total") is None else float(r["total"]) for r in rows], dtype=torch.float64)


def scored_totals(rows: list[dict]) -> list[float]:
    """The total rewards of the scored rows."""
    return [float(r["total"]) for r in rows if r.get("total") is not None]


def sampled_metrics(rows: list[dict], round_: int) -> dict:
    totals = scored_totals(rows)
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
