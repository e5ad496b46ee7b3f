"""Sampling from an FSDP2-sharded policy: every unit's weights gathered once for the whole generate() call and
resharded after, on every rank together (the gathers are collectives)."""

from __future__ import annotations

import weakref
from contextlib import contextmanager

ROOT_ATTR = "_rlft_fsdp_root"  # on every module of a sharded model: a weak reference to the FSDP root


def fsdp_units(model) -> list:
    """The FSDP2 units inside `model` (empty when it is not sharded)."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # a torch without FSDP2
        return []
    return [m for m in model.modules() if isinstance(m, FSDPModule)]


def mark_sharded(root) -> None:
    """After sharding: every module knows its FSDP root (so sampling from the policy inside PPO's value-head
    wrapper gathers the root's own weights too), and is marked FSDP-managed for transformers' generate(),
    which keeps ranks in step (synced_gpus) only for modules so marked by its own FSDP2 code. Without that a
    rank whose samples all end early stops calling forward, and the other ranks' all-gathers mismatch or hang."""
    ref = weakref.ref(root)
    for module in root.modules():
        module._is_fsdp_managed_module = True
        setattr(module, ROOT_ATTR, ref)


@contextmanager
def whole_weights(model):
    """Unshard every FSDP unit of `model` for the block (a no-op for an unsharded model).

    Why: generate() runs the policy's submodules without the FSDP root's forward, and a unit that shares a
    group with others (the final norm with the embeddings and head) is then not gathered by its own hooks.
    Gathering all units first also saves one all-gather per layer per generated token."""
    root = getattr(model, ROOT_ATTR, None)
    units = fsdp_units(root() if root is not None and root() is not None else model)
    for unit in units:
        unit.unshard()
    try:
        yield model
    finally:
        for unit in units:
            unit.reshard()
