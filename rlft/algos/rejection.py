"""The keep rule of rejection-sampling SFT: which sampled completions become training pairs.

    best             the best completion of each prompt, if its total is above the threshold
    above_threshold  every completion whose total is above the threshold

then at most `max_samples` are kept, highest totals first. Ties are broken by position (prompt,
then sample order), so the same samples always give the same kept set. A completion without a
score (NaN total or valid=False) is never kept. "Above" is strict (total > threshold), as in the
staged guide's "keep samples with reward > 0.6".

Tensors in, tensors out, no trainer state; totals are flat and group-ordered
(``totals_PG[p * G + g]``).
"""

from __future__ import annotations

import torch
from torch import Tensor

KEEP_RULES = ("best", "above_threshold")


def keep_mask(totals_PG: Tensor, group_size: int, rule: str, threshold: float, max_samples: int | None = None,
              *, valid: Tensor | None = None) -> Tensor:
    """(P*G,) bool: True for the completions the keep rule keeps."""
    if rule not in KEEP_RULES:
        raise ValueError(f"unknown keep rule {rule!r}; valid: {', '.join(KEEP_RULES)}")
    if totals_PG.dim() != 1 or group_size < 1 or totals_PG.numel() % group_size:
        raise ValueError(f"totals must be 1-D with a multiple of group_size ({group_size}) entries, "
                         f"got shape {tuple(totals_PG.shape)}")
    ok = torch.isfinite(totals_PG)
    if valid is not None:
        ok &= valid.to(torch.bool)
    clears = ok & (totals_PG > threshold)
    if rule == "above_threshold":
        keep = clears
    else:
        # best per group: first index among the group's maxima (argmax of -inf-filled scores)
        scores_PG = torch.where(ok, totals_PG, torch.full_like(totals_PG, float("-inf"))).view(-1, group_size)
        best_P = scores_PG.argmax(dim=1)  # first maximal index: deterministic ties
        keep = torch.zeros_like(clears)
        keep[torch.arange(best_P.numel()) * group_size + best_P] = True
        keep &= clears
    if max_samples is not None and int(keep.sum()) > max_samples:
        idx = keep.nonzero().flatten().tolist()
        vals = totals_PG.tolist()
        chosen = sorted(idx, key=lambda i: (-vals[i], i))[:max_samples]
        keep = torch.zeros_like(keep)
        keep[chosen] = True
    return keep
