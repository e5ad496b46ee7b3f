"""The loop's collective reductions over the processes of a run (every rank takes part in each call)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor


def mean_over_processes(accelerator, x) -> float:
    """Mean over processes of a scalar."""
    t = torch.as_tensor(x, dtype=torch.float32, device=accelerator.device).reshape(1)
    if accelerator.num_processes > 1:
        t = accelerator.gather(t)
    return float(t.mean())


@dataclass(frozen=True)
class Processes:
    """The run's processes as the advantage steps see them: a scalar's mean and a tensor's sum over them."""
    accelerator: Any

    @property
    def count(self) -> int:
        return self.accelerator.num_processes

    def mean(self, x) -> float:
        return mean_over_processes(self.accelerator, x)

    def sum(self, t: Tensor) -> Tensor:
        """`t` summed over the processes: the global batch's whitening and return moments."""
        return self.accelerator.reduce(t.to(self.accelerator.device), reduction="sum")
