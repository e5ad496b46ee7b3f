"""GRPO's batch arithmetic, shared by its spec (planning, validation) and its runner: how one generation of
batch_size x group_size completions is split into TRL's micro-batches, and how often it evaluates. Pure arithmetic."""

from __future__ import annotations

from rlft.config.schema import RlftConfig
from rlft.errors import RunError


def grpo_batch_layout(cfg: RlftConfig, num_processes: int) -> dict:
    """rlft's batch_size / group_size / num_substeps as TRL's micro-batch, accumulation and
    steps_per_generation: one generation of batch_size x group_size completions, split into
    num_substeps optimizer steps, each accumulated over micro-batches of at most
    train.per_device_train_batch_size completions per process."""
    g = cfg.grpo
    total = g.batch_size * g.group_size
    per_substep = total // g.num_substeps
    if per_substep % num_processes:
        raise RunError(f"grpo.batch_size x grpo.group_size / grpo.num_substeps = {per_substep} completions per "
                       f"optimizer step cannot be split over {num_processes} processes")
    per_process = per_substep // num_processes
    if g.dynamic_sampling and not cfg.env.name and g.batch_size % num_processes:  # rlft/trainers/grpo_dynamic.py
        raise RunError(f"grpo.dynamic_sampling with {num_processes} processes needs grpo.batch_size ({g.batch_size}) "
                       f"divisible by {num_processes}: each process samples, refills and keeps whole groups of its "
                       f"own; set grpo.batch_size to a multiple of {num_processes} or turn grpo.dynamic_sampling off")
    # streaming hands each substep over in num_minibatches pieces: a micro-batch never spans two of them
    per_piece = per_process // (g.stream_minibatch.num_minibatches or 1)
    micro = max(d for d in range(1, min(cfg.train.per_device_train_batch_size, per_piece) + 1) if per_piece % d == 0)
    accum = per_process // micro
    return dict(per_device_train_batch_size=micro, gradient_accumulation_steps=accum,
                steps_per_generation=g.num_substeps * accum, num_generations=g.group_size)


def eval_every(cfg: RlftConfig) -> int:
    """Steps between evaluations during training (0: only at the start and the end)."""
    g = cfg.grpo
    if g.eval_every is not None:
        return g.eval_every
    return max(10, max(cfg.train.max_steps, 0) // 5)
