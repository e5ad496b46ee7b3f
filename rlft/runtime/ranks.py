"""Multi-process DDP runs end with every rank holding the same trainable weights (DDP all-reduces gradients); rank 0
records each rank's checksum in distributed.json. Under FSDP each rank holds its own shard, so there is
nothing to compare."""

from __future__ import annotations

import json
import sys

from rlft.run import RunDir


def check_ranks_in_sync(trainer, run: RunDir) -> None:
    acc = trainer.accelerator
    if acc.num_processes < 2:
        return
    import torch

    model = acc.unwrap_model(trainer.model)
    if acc.distributed_type.value == "FSDP":
        return
    total = sum(p.detach().double().sum() for p in model.parameters() if p.requires_grad)
    sums = acc.gather(torch.as_tensor(total, device=acc.device).reshape(1)).tolist()
    if acc.is_main_process:
        in_sync = max(sums) - min(sums) <= 1e-9 * max(1.0, abs(sums[0]))
        (run.root / "distributed.json").write_text(json.dumps(
            {"num_processes": acc.num_processes, "param_checksums": sums, "in_sync": in_sync}))
        if not in_sync:
            print(f"rlft: WARNING ranks diverged: trainable-parameter checksums {sums}", file=sys.stderr)
