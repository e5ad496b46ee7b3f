"""DAPO's dynamic sampling, as plain arithmetic over groups: which sampled groups a step trains on.

A group whose `group_size` returns are all equal has zero advantage under every group baseline, so it adds
nothing but its tokens to the loss. Dynamic sampling keeps sampling new groups until the step holds enough
with signal; this module decides, from each sampled group's signal flag in sampling order, which to keep.
No torch: lists in, lists out.
"""

from __future__ import annotations

__all__ = ["pick_groups"]


def pick_groups(signal: list[bool], want: int) -> tuple[list[int], int]:
    """(indices of the `want` groups to train on, in sampling order; how many of them carry signal).

    The first `want` groups with signal, in the order they were sampled; when fewer exist, the earliest
    constant groups fill the rest so the step keeps its size (their advantage is 0: they train nothing but
    keep the batch layout every minibatch count was planned on). Raises ValueError with fewer than `want`
    groups sampled in all."""
    if len(signal) < want:
        raise ValueError(f"{len(signal)} groups sampled, {want} needed")
    with_signal = [i for i, s in enumerate(signal) if s][:want]
    fill = [i for i, s in enumerate(signal) if not s][:want - len(with_signal)]
    return sorted(with_signal + fill), len(with_signal)
