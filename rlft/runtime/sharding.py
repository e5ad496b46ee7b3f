"""FSDP2 that really shards, on CUDA and on CPU, and the proof of it for summary.json.

accelerate promotes a multi-process state to FSDP only from GPU-like types: on CPU (gloo) it silently runs
DDP when FSDP is asked for, and a run exits 0 without ever having sharded. torch's own `fully_shard` works
on CPU over gloo, so for `hw.distributed_strategy: fsdp` on CPU rlft promotes accelerate's MULTI_CPU state
to FSDP itself (`promote_cpu_fsdp`), and accelerate's own FSDP2 preparation (`fully_shard` per decoder
layer, embeddings and head, then the root) runs unchanged on every trainer. Whichever path ran,
`check_sharded` then refuses a run whose parameters are not DTensors (exit 3)."""

from __future__ import annotations

import os

from rlft.config.schema import RlftConfig
from rlft.errors import RunError

CPU_FSDP_ENV = "RLFT_CPU_FSDP"  # set by the launcher for the processes of an fsdp run on CPU


class ShardingError(RunError):
    """FSDP was asked for and the model is not sharded: exit 3, as a preflight failure."""

    def __init__(self, message: str):
        super().__init__(message, exit_code=3)


def promote_cpu_fsdp() -> None:
    """Make accelerate's state FSDP where it would fall back to DDP on CPU (see the module doc). Idempotent."""
    from accelerate.state import AcceleratorState, PartialState
    from accelerate.utils import DistributedType

    if getattr(AcceleratorState.__init__, "rlft_cpu_fsdp", False):
        return
    original = AcceleratorState.__init__

    def init(self, mixed_precision=None, cpu=False, dynamo_plugin=None, deepspeed_plugin=None, fsdp_plugin=None,
             *args, **kwargs):
        original(self, mixed_precision, cpu, dynamo_plugin, deepspeed_plugin, fsdp_plugin, *args, **kwargs)
        if fsdp_plugin is not None and self.distributed_type == DistributedType.MULTI_CPU:
            self.distributed_type = DistributedType.FSDP
            if self._mixed_precision != "no":
                fsdp_plugin.set_mixed_precision(self._mixed_precision)
            self.fsdp_plugin = fsdp_plugin
            # as accelerate does for the GPU types: later AcceleratorState() calls copy the type from here
            PartialState._shared_state["distributed_type"] = DistributedType.FSDP

    init.rlft_cpu_fsdp = True
    AcceleratorState.__init__ = init


def set_up_sharding(cfg: RlftConfig) -> None:
    """Called once per process before any trainer (and so any Accelerator) exists."""
    if cfg.hw.distributed_strategy == "fsdp" and os.environ.get(CPU_FSDP_ENV):
        promote_cpu_fsdp()


def is_dtensor(p) -> bool:
    return type(p).__name__ == "DTensor" or type(getattr(p, "data", None)).__name__ == "DTensor"


def local_numel(p) -> int:
    return p.to_local().numel() if hasattr(p, "to_local") else p.numel()


def parameter_layout(model) -> tuple[int, int, int]:
    """(parameters of the whole model, parameters this rank holds, how many tensors are sharded)."""
    full = local = sharded = 0
    seen = set()
    for p in model.parameters():
        if id(p) in seen:  # tied weights count once
            continue
        seen.add(id(p))
        full += p.numel()  # a DTensor's numel is the global one
        local += local_numel(p)
        sharded += is_dtensor(p)
    return full, local, sharded


def distributed_block(cfg: RlftConfig, accelerator, model) -> dict:
    """summary.json's `distributed` block: what ran, and the proof (the largest share any rank holds)."""
    import torch

    full, local, sharded = parameter_layout(model)
    world = accelerator.num_processes
    if world > 1:
        locals_ = accelerator.gather(torch.tensor([local], device=accelerator.device)).tolist()
        sharded_all = accelerator.gather(torch.tensor([sharded], device=accelerator.device)).tolist()
    else:
        locals_, sharded_all = [local], [sharded]
    fsdp = is_fsdp(accelerator)
    return {
        "strategy": "fsdp" if fsdp else ("ddp" if world > 1 else "none"),
        "fsdp_version": accelerator.state.fsdp_plugin.fsdp_version if fsdp else None,
        "accelerate_type": accelerator.distributed_type.value,
        "world_size": world,
        "num_machines": cfg.hw.num_machines,
        "params_full": int(full),
        "params_local_max": int(max(locals_)),
        "params_local_min": int(min(locals_)),
        "sharded_tensors_min": int(min(sharded_all)),
    }


def memory_numbers(accelerator, model, optimizer) -> dict:
    """At the end of training, the largest per-rank figures: bytes of parameters and of optimizer state this rank
    holds (its shards under FSDP), and its peak resident memory (the OS's count: weights, activations, buffers)."""
    import resource

    import torch

    params = sum(local_numel(p) * p.element_size() for p in {id(p): p for p in model.parameters()}.values())
    state = 0
    for per_param in (optimizer.state.values() if optimizer is not None else ()):
        for value in per_param.values():
            if torch.is_tensor(value):
                state += local_numel(value) * value.element_size()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB
    mine = torch.tensor([params, state, peak], dtype=torch.float64, device=accelerator.device)
    every = accelerator.gather(mine.reshape(1, 3)).reshape(-1, 3) if accelerator.num_processes > 1 else mine[None]
    top = every.max(dim=0).values.tolist()
    return {"param_bytes_local_max": int(top[0]), "optimizer_state_bytes_local_max": int(top[1]),
            "peak_rss_bytes_max": int(top[2])}


def check_sharded(cfg: RlftConfig, block: dict) -> None:
    """FSDP asked for and not engaged on every rank: refuse (the caller exits 3) rather than train unsharded."""
    if cfg.hw.distributed_strategy != "fsdp":
        return
    if block["strategy"] != "fsdp" or block["sharded_tensors_min"] == 0 or block["world_size"] < 2:
        raise ShardingError(
            f"hw.distributed_strategy=fsdp but the model was not sharded (accelerate ran "
            f"{block['accelerate_type']} with {block['world_size']} process(es), "
            f"{block['sharded_tensors_min']} sharded tensors on some rank); refusing to train unsharded")


def describe(block: dict) -> str:
    """The start line's words."""
    if block["strategy"] == "fsdp":
        share = block["params_local_max"] / max(1, block["params_full"])
        return (f"FSDP{block['fsdp_version']} over {block['world_size']} processes on {block['num_machines']} "
                f"machine(s): each rank holds at most {share:.0%} of {block['params_full']:,} parameters")
    if block["strategy"] == "ddp":
        return (f"DDP over {block['world_size']} processes on {block['num_machines']} machine(s): every rank holds "
                f"all {block['params_full']:,} parameters")
    return "one process"


def settle_root(model) -> None:
    """One forward through the whole model right after sharding. FSDP2 picks its root at the first forward,
    and a policy that generates first (its generate() bypasses the wrapper's forward) would make a leaf unit
    the root ("FSDP requires a single root module")."""
    import torch

    device = next(model.parameters()).device
    with torch.no_grad():
        model(input_ids=torch.zeros(1, 1, dtype=torch.long, device=device))


def is_fsdp(accelerator) -> bool:
    return accelerator.distributed_type.value == "FSDP"


def full_state_dict(model) -> dict:
    """The whole model's weights on every rank (a collective: every rank calls it), gathered from the shards."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))


def unsharded_copy(sharded, fresh):
    """`fresh` (the same architecture, unsharded, e.g. rebuilt from the config) holding `sharded`'s trained
    weights: the policy a stage of rounds samples its next round with, without needing a shared filesystem."""
    fresh.load_state_dict(full_state_dict(sharded))
    return fresh
