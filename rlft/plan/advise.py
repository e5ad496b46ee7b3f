"""What to change first: each lever is a set of KEY=VALUE overrides, planned again with the same model and
device, and the levers are ranked by the peak they leave."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlft.config.schema import RlftConfig, from_dict, to_dict
from rlft.plan.estimate import TRL_VLLM_GPU_MEMORY_UTILIZATION, Plan, make_plan, workload


@dataclass(frozen=True)
class Lever:
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


def candidates(cfg: RlftConfig) -> list[tuple[str, dict[str, Any]]]:
    """(what, overrides) for the levers that apply to this config."""
    out: list[tuple[str, dict[str, Any]]] = []
    t, stage = cfg.train, cfg.stage
    world = cfg.hw.num_processes * cfg.hw.num_machines
    micro = workload(cfg, world).train_rows // (2 if stage in ("dpo", "orpo") else 1)
    if stage == "ppo":
        mini = cfg.ppo.mini_batch_size
        if mini >= 2 and cfg.ppo.batch_size % (mini // 2) == 0 and (mini // 2) % world == 0:
            out.append(("smaller PPO minibatch (more accumulation steps)",
                        {"ppo.mini_batch_size": mini // 2,
                         "train.gradient_accumulation_steps": t.gradient_accumulation_steps * 2}))
    elif micro >= 2:
        over: dict[str, Any] = {"train.per_device_train_batch_size": micro // 2}
        if stage != "grpo":  # GRPO's accumulation follows from its batch layout; elsewhere keep the effective batch
            over["train.gradient_accumulation_steps"] = t.gradient_accumulation_steps * 2
        out.append(("halve the micro-batch", over))
    sampling = {"grpo": ("grpo.batch_size", cfg.grpo.batch_size, cfg.grpo.num_substeps),
                "ppo": ("ppo.batch_size", cfg.ppo.batch_size, cfg.ppo.mini_batch_size),
                "rs_sft": ("rs_sft.generation_batch_size", cfg.rs_sft.generation_batch_size, 1),
                "awr": ("awr.generation_batch_size", cfg.awr.generation_batch_size, 1)}.get(stage)
    if sampling:  # the KV cache and prefill grow with the rows sampled at once; the new size must stay divisible
        key, size, divisor = sampling
        if size >= 2 and (size // 2) % divisor == 0 and (size // 2) % (world if stage == "ppo" else 1) == 0:
            out.append(("sample fewer rows at once", {key: size // 2}))
    if not t.gradient_checkpointing:
        out.append(("activation checkpointing", {"train.gradient_checkpointing": True}))
    if cfg.lora.enabled and cfg.lora.r > 4:
        r = cfg.lora.r // 2
        over = {"lora.r": r}
        if cfg.lora.lora_alpha:
            over["lora.lora_alpha"] = max(1, cfg.lora.lora_alpha // 2)
        out.append(("halve the LoRA rank", over))
    if not cfg.lora.enabled:
        out.append(("train a LoRA adapter instead of the full model", {"lora.enabled": True}))
    if stage in ("dpo", "orpo"):
        section = getattr(cfg, stage)
        length = min(section.max_length, t.max_seq_length)
        if length >= 16:
            out.append(("halve the sequence length", {f"{stage}.max_length": length // 2}))
    else:
        budget = {"grpo": cfg.grpo.max_tokens, "ppo": cfg.ppo.max_tokens}.get(stage) or getattr(cfg, stage).max_tokens
        shorter = max(budget + 8, t.max_seq_length // 2)
        if shorter < t.max_seq_length:
            out.append(("shorter prompts (sequence length)", {"train.max_seq_length": shorter}))
    if cfg.hw.device == "cuda" and cfg.hw.distributed_strategy in ("none", "ddp"):
        n = max(cfg.hw.num_processes, 4) if cfg.hw.num_processes == 1 else cfg.hw.num_processes
        out.append((f"FSDP over {n} GPUs", {"hw.distributed_strategy": "fsdp", "hw.num_processes": n}))
    if stage == "grpo" and cfg.grpo.generation_backend == "vllm" and cfg.grpo.vllm_mode == "colocate":
        util = float(cfg.trl.get("vllm_gpu_memory_utilization", TRL_VLLM_GPU_MEMORY_UTILIZATION))
        out.append(("smaller vLLM share", {"trl.vllm_gpu_memory_utilization": round(util / 2, 3)}))
    return out


def levers(cfg: RlftConfig, plan: Plan) -> list[Lever]:
    """The levers that lower the peak, the largest saving first."""
    out = []
    for what, overrides in candidates(cfg):
        after = make_plan(with_overrides(cfg, overrides), plan.shape, plan.device_bytes, plan.device_source, plan.hw)
        if after.peak < plan.peak * 0.999:
            out.append(Lever(what, overrides, after.peak))
    return sorted(out, key=lambda lv: lv.peak)


def dominant(plan: Plan, n: int = 3) -> list[tuple[str, float]]:
    """The largest terms at the peak, with their share of it."""
    phase = plan.peak_phase
    at_peak = [t for t in plan.terms if t.phase == "always" or t.phase in phase]
    top = sorted(at_peak, key=lambda t: t.bytes, reverse=True)[:n]
    return [(t.name, t.bytes / plan.peak) for t in top if t.bytes > 0]
