"""What to change first: each lever is a set of KEY=VALUE overrides, planned again with the same model and
device, and the levers are ranked by the peak they leave."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlft.config.schema import RlftConfig, from_dict, to_dict
from rlft.plan.estimate import Plan, make_plan, workload
from rlft.plan.lengths import DataBasis


@dataclass(frozen=True)
class Lever:
    """A change that lowers a plan's peak: the knob in words, its overrides and the peak after it."""
    what: str                  # the knob, in words
    overrides: dict[str, Any]  # KEY=VALUE to paste on the command line
    peak: float                # planned peak after the change, bytes

    def command(self) -> str:
        def fmt(v):
            return str(v).lower() if isinstance(v, bool) else str(v)
        return " ".join(f"{k}={fmt(v)}" for k, v in self.overrides.items())


def with_overrides(cfg: RlftConfig, overrides: dict[str, Any]) -> RlftConfig:
    """A copy of the typed config with dotted keys set (no validation: levers only take valid steps)."""
    data = to_dict(cfg)
    for key, value in overrides.items():
        node = data
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return from_dict(RlftConfig, data)


def candidates(cfg: RlftConfig, data: DataBasis | None = None) -> list[tuple[str, dict[str, Any]]]:
    """(what, overrides) for the levers that apply to this config: the stage's own (its spec's memory profile:
    micro-batch, rows sampled at once, sequence length, ...), then those of any stage."""
    t = cfg.train
    world = cfg.hw.num_processes * cfg.hw.num_machines
    out: list[tuple[str, dict[str, Any]]] = list(workload(cfg, world, data).levers)
    if not t.gradient_checkpointing:
        out.append(("activation checkpointing", {"train.gradient_checkpointing": True}))
    if cfg.lora.enabled and cfg.lora.r > 4:
        r = cfg.lora.r // 2
        over: dict[str, Any] = {"lora.r": r}
        if cfg.lora.lora_alpha:
            over["lora.lora_alpha"] = max(1, cfg.lora.lora_alpha // 2)
        out.append(("halve the LoRA rank", over))
    if not cfg.lora.enabled:
        out.append(("train a LoRA adapter instead of the full model", {"lora.enabled": True}))
    if cfg.hw.device == "cuda" and cfg.hw.distributed_strategy in ("none", "ddp"):
        n = max(cfg.hw.num_processes, 4) if cfg.hw.num_processes == 1 else cfg.hw.num_processes
        out.append((f"FSDP over {n} GPUs", {"hw.distributed_strategy": "fsdp", "hw.num_processes": n}))
    return out


def levers(cfg: RlftConfig, plan: Plan) -> list[Lever]:
    """The levers that lower the peak, the largest saving first (re-planned on the same data's lengths: a
    shorter limit only counts where the data reaches it)."""
    out = []
    for what, overrides in candidates(cfg, plan.data):
        after = make_plan(with_overrides(cfg, overrides), plan.shape, plan.device_bytes, plan.device_source, plan.hw,
                          plan.data)
        if after.peak < plan.peak * 0.999:
            out.append(Lever(what, overrides, after.peak))
    return sorted(out, key=lambda lv: lv.peak)


def dominant(plan: Plan, n: int = 3) -> list[tuple[str, float]]:
    """The largest terms at the peak, with their share of it."""
    phase = plan.peak_phase
    at_peak = [t for t in plan.terms if t.phase == "always" or t.phase in phase]
    top = sorted(at_peak, key=lambda t: t.bytes, reverse=True)[:n]
    return [(t.name, t.bytes / plan.peak) for t in top if t.bytes > 0]
