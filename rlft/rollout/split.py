"""A sampling pass split over the processes of a multi-process run (RS-SFT / AWR rounds, `evaluate`).

The prompts are cut into chunks (one generate call each) that do not depend on the number of processes, each
seeded from its first prompt; chunk k is drawn by rank k % world (round-robin), and the results are gathered to
every rank in chunk order. Since a chunk draws the same tokens whichever process draws it, the gathered result
is the one a single process would have drawn, for any number of processes.

Under FSDP every generate() call is a collective (the weights are gathered for it, and generate keeps the ranks
in step), so every rank must sample equally often: a rank with fewer chunks draws a repeated one and drops it
(`rank_calls(..., even=True)`). An unsharded model samples without collectives and skips that padding.
`rank_calls` gives every rank one entry per wave either way, so a gather after each wave pairs up.
"""

from __future__ import annotations

import math
from typing import Any

from rlft import world

__all__ = ["gather", "is_sharded", "process_group", "rank_calls"]


def process_group() -> tuple[int, int]:
    """(rank, world size) of the process group, (0, 1) in a single process. A multi-process run whose group is
    not set up yet (nothing has built an Accelerator) gets it set up as accelerate would."""
    import torch.distributed as dist

    if not dist.is_available():
        return 0, 1
    if not dist.is_initialized() and world.world_size() > 1:
        from accelerate import PartialState

        PartialState()  # what the trainer's Accelerator would do first: join the group launched processes form
    if not dist.is_initialized():
        return 0, 1
    return dist.get_rank(), dist.get_world_size()


def rank_calls(num_chunks: int, rank: int, world: int, even: bool = False) -> list[tuple[int | None, bool]]:
    """One (chunk index, keep) per wave of `world` chunks: wave i holds chunks [i*world, (i+1)*world) and `rank`
    draws chunk i*world + rank. Past the last chunk a rank draws nothing (None) or, with `even` (every rank must
    call generate equally often), repeats its last chunk (chunk 0 if it has none) with keep=False: its results
    are dropped. Every rank gets ceil(num_chunks / world) entries, so a gather after each wave pairs up."""
    waves = math.ceil(num_chunks / world) if num_chunks else 0
    out: list[tuple[int | None, bool]] = []
    for i in range(waves):
        k = i * world + rank
        if k < num_chunks:
            out.append((k, True))
        else:
            out.append((next((c for c, keep in reversed(out) if keep), 0) if even else None, False))
    return out


def gather(obj: Any, world: int) -> list:
    """`obj` of every rank, in rank order (every rank takes part; [obj] in a single process)."""
    if world == 1:
        return [obj]
    import torch.distributed as dist

    out: list = [None] * world
    dist.all_gather_object(out, obj)
    return out


def is_sharded(model) -> bool:
    """True when sampling from `model` gathers FSDP-sharded weights (every rank must then sample equally often)."""
    from rlft.models.sharded import ROOT_ATTR, fsdp_units

    return getattr(model, ROOT_ATTR, None) is not None or bool(fsdp_units(model))
