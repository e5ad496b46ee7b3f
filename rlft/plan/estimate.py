"""A resolved config + a model shape -> the memory terms of one device, grouped into phases, and the peak.

The peak is the terms held for the whole run (`always`) plus the largest phase: sampling (KV cache, the
sampling logits), PPO's scoring pass, or training (activations, logits, gradients). With async or streaming
sampling the sampler runs while the learner trains, so those two phases add up. On CPU every phase adds
up: glibc keeps what a phase freed in the process (RSS does not fall back between phases), and the
`allocator` term adds what it holds beyond the live tensors.

What a stage holds (its batches in tokens and rows, reference, value head, scoring pass, sampler copy,
vLLM share) is its spec's `memory(cfg, world, data)` profile (`rlft/stages/<name>/spec.py`); a stage without
one plans as SFT on train.*. Sequence terms use the training data's longest rows where `rlft.plan.lengths`
could read them (`data`, capped by the config's limits), else the config's limits (a sampled prompt at
train.max_seq_length minus the completion budget), the worst case any data can reach.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rlft.config.schema import RlftConfig
from rlft.config.stages import get_spec
from rlft.config.stagespec import SEPARATE_REFERENCE, MemoryProfile, Reference, sft_profile
from rlft.plan import terms as T
from rlft.plan.model_shape import ModelShape

if TYPE_CHECKING:  # a plan at the config's limits (validate-config's) reads no data: lengths stays unloaded
    from rlft.plan.lengths import DataBasis


@dataclass
class Plan:
    """The expected peak memory of one device for a config: its terms, grouped into phases."""
    stage: str
    hw: str
    device: str
    world: int
    precision: str
    shape: ModelShape
    terms: list[T.Term]
    device_bytes: float | None
    device_source: str
    notes: list[str] = field(default_factory=list)
    adds: tuple[str, ...] = ()  # phases held at once (summed); the others count by the largest
    data: DataBasis | None = None  # the data's lengths it planned with; None: the config's limits
    limits_why: str = ""           # why the limits, when data was asked for
    tokens: dict[str, int] = field(default_factory=dict)  # the sequence lengths planned (prompt, completion, ...)

    @property
    def basis(self) -> str:
        return "limits" if self.data is None else "data"

    def phase_bytes(self, phase: str) -> float:
        return sum(t.bytes for t in self.terms if t.phase == phase)

    @property
    def persistent(self) -> float:
        return self.phase_bytes(T.ALWAYS)

    @property
    def phases(self) -> dict[str, float]:
        return {p: self.phase_bytes(p) for p in (T.SAMPLING, T.SCORING, T.TRAINING)
                if any(t.phase == p for t in self.terms)}

    @property
    def peak_phase(self) -> str:
        phases = self.phases
        rest = {p: b for p, b in phases.items() if p not in self.adds}
        held = [p for p in phases if p in self.adds] + ([max(rest, key=rest.get)] if rest else [])
        return " + ".join(held) or T.ALWAYS

    @property
    def peak(self) -> float:
        phases = self.phases
        rest = [b for p, b in phases.items() if p not in self.adds]
        return self.persistent + sum(b for p, b in phases.items() if p in self.adds) + max(rest, default=0)

    @property
    def fits(self) -> bool | None:
        return None if self.device_bytes is None else self.peak <= self.device_bytes

    def term(self, name: str) -> T.Term | None:
        return next((t for t in self.terms if t.name == name), None)


def machine_memory() -> float | None:
    """This machine's RAM in bytes (the CPU profile's device memory)."""
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def device_memory(cfg: RlftConfig) -> tuple[float | None, str]:
    """(bytes of one device, where the figure comes from)."""
    gb = cfg.hw.device_memory_gb
    if gb is not None:
        return gb * T.GIB, "hw.device_memory_gb"
    if cfg.hw.device in ("cpu", "mps"):
        mem = machine_memory()
        return mem, "this machine's RAM (hw.device_memory_gb unset)"
    return None, "unknown: set hw.device_memory_gb"


@dataclass(frozen=True)
class Precision:
    """Bytes per value of the frozen weights, matmul outputs and trained parameters under the config's precision."""
    weight_b: int    # frozen weights (and the residual stream) as loaded
    compute_b: int   # matmul outputs: the autocast dtype under bf16/fp16
    train_b: int     # trained parameters, their gradients and AdamW states
    name: str


def precision(cfg: RlftConfig) -> Precision:
    t = cfg.train
    dtype = cfg.model.torch_dtype
    # rlft.models.weights.torch_dtype: `auto` loads bf16 under bf16 training, else fp32
    weight_b = 2 if dtype in ("bfloat16", "float16") or (dtype == "auto" and t.bf16) else 4
    compute_b = 2 if (t.bf16 or t.fp16) else weight_b
    train_b = 4 if cfg.lora.enabled else weight_b  # PEFT keeps adapters in fp32
    return Precision(weight_b, compute_b, train_b, "bf16" if t.bf16 else "fp16" if t.fp16 else "fp32")


def workload(cfg: RlftConfig, world: int, data: DataBasis | None = None) -> MemoryProfile:
    """What one device holds at once: the stage's own profile (for the data's lengths, or the limits), or SFT
    on train.* when its spec has none."""
    spec = get_spec(cfg.stage)
    return spec.memory(cfg, world, data.lengths if data else None) if spec.memory else sft_profile(cfg)


def _reference(ref: Reference, shape: ModelShape, pr: Precision, shard: int) -> T.Term:
    if ref.held == SEPARATE_REFERENCE:
        return T.reference(shape.num_params(), pr.weight_b, True, ref.why, shard)
    return T.reference(shape.num_params(), pr.weight_b, False, ref.why)  # none, or the adapter-disabled policy


def sharding(cfg: RlftConfig, world: int) -> tuple[int, int, int, str]:
    """(weights, gradients, optimizer) divided over how many ranks, and a one-line description."""
    hw = cfg.hw
    if hw.distributed_strategy == "fsdp":
        s = hw.fsdp_sharding_strategy
        w = {"FULL_SHARD": world, "SHARD_GRAD_OP": 1, "HYBRID_SHARD": hw.num_processes, "NO_SHARD": 1}[s]
        g = {"FULL_SHARD": world, "SHARD_GRAD_OP": world, "HYBRID_SHARD": hw.num_processes, "NO_SHARD": 1}[s]
        return w, g, g, f"FSDP {s} over {world} ranks"
    if hw.distributed_strategy == "deepspeed":
        z = hw.deepspeed_zero_stage or 0
        return (world if z >= 3 else 1), (world if z >= 2 else 1), (world if z >= 1 else 1), \
            f"DeepSpeed ZeRO-{z} over {world} ranks"
    if hw.distributed_strategy == "ddp":
        return 1, 1, 1, f"DDP over {world} ranks (full replica per rank)"
    return 1, 1, 1, "one process" if world == 1 else f"{world} processes"


def _parameter_terms(cfg: RlftConfig, shape: ModelShape, pr: Precision, world: int, notes: list[str]):
    """Weights, LoRA, gradients, optimizer state and mixed-precision copies; (terms, trainable count, adapted
    module names)."""
    sw, sg, so, _ = sharding(cfg, world)
    n_all = shape.num_params()
    out = [T.weights(n_all, pr.weight_b, sw)]
    if cfg.lora.enabled:
        n_train, mats, adapted, missing = shape.lora(list(cfg.lora.target_modules), cfg.lora.r)
        if missing:
            notes.append(f"lora.target_modules not in a {shape.model_type or 'this'} layer, not counted: "
                         f"{', '.join(missing)}")
        out.append(T.lora_params(n_train, cfg.lora.r, adapted, shape.num_layers, pr.train_b, sw))
    else:
        n_train, mats, adapted = n_all, shape.matrices(), []
    out.append(T.gradients(n_train, pr.train_b, sg))
    out.append(T.optimizer_state(cfg.train.optim, n_train, pr.train_b, mats, so))
    if cfg.hw.distributed_strategy == "fsdp" and cfg.hw.fsdp_offload_params:  # held in CPU memory instead
        out = [T.Term(t.name, 0, t.phase, f"offloaded to CPU (hw.fsdp_offload_params): {t.formula}") for t in out]
    out.append(T.master_copies(n_train, pr.train_b, pr.compute_b, cfg.hw.distributed_strategy == "deepspeed", so))
    return out, n_train, adapted


def _training_terms(cfg: RlftConfig, shape: ModelShape, pr: Precision, w: MemoryProfile,
                    adapted: list[str]) -> list[T.Term]:
    """Activations and logits of one training micro-batch."""
    cuda = cfg.hw.device == "cuda"
    per_layer = T.layer_activation_bytes(
        shape.hidden_size, shape.q_dim, shape.kv_dim, shape.num_heads, shape.intermediate_size, pr.compute_b,
        pr.weight_b, lora_r={m: cfg.lora.r for m in adapted}, full=not cfg.lora.enabled,
        autocast=cfg.train.bf16 or cfg.train.fp16, dropout=cfg.lora.enabled and cfg.lora.lora_dropout > 0,
        mask_b=1 if cuda else 4, experts_per_token=shape.experts_per_token)
    tokens = w.train_rows * w.train_seq
    # on CUDA the fused head scores only the completion tokens; without Triton it scores every position
    scored = w.train_rows * (w.scored if cuda else w.train_seq - 1)
    out = [T.activations(tokens, shape.num_layers, per_layer, pr.weight_b, shape.hidden_size,
                         cfg.train.gradient_checkpointing, scored if w.full_logits is None else tokens, pr.compute_b)]
    if w.full_logits is None:
        out.append(T.fused_head(scored, shape.vocab_size, shape.hidden_size, pr.compute_b, cuda, not cfg.lora.enabled))
    else:  # the loss takes the whole logits, and fp32 copies of its scored positions
        lg = w.full_logits
        out.append(T.full_logits(w.train_rows, w.train_seq, lg.scored, shape.vocab_size, pr.compute_b, lg.fp32_copies,
                                 what=lg.what))
    return out


def _sampling_terms(cfg: RlftConfig, shape: ModelShape, pr: Precision, w: MemoryProfile, world: int,
                    device_bytes: float | None, notes: list[str]) -> list[T.Term]:
    """Sampling (KV cache, prefill, sampling logits, or a colocated vLLM's share) and a scoring pass over the
    sampled batch (its log-probs, hidden states and values)."""
    out: list[T.Term] = []
    sw = sharding(cfg, world)[0]
    # rlft's own engine (sampling.backend vllm) samples every path but a training batch TRL's trainer samples
    engine = cfg.sampling.backend == "vllm" and (w.sample_rows > 0 or w.vllm_share is not None)
    trains_on_engine = engine and not w.trl_samples
    if engine:
        sampling = cfg.sampling
        out.append(T.rlft_engine(cfg.hw.device, sampling.gpu_memory_utilization, device_bytes, sampling.kv_cache_gib,
                                 shape.num_params(), pr.weight_b))
    if w.vllm_share is not None:
        out.append(T.vllm_share(w.vllm_share, device_bytes, w.vllm_mode))
        notes.append("vLLM samples within its own share (its KV cache and weights), not in this process's tensors")
    elif trains_on_engine:
        notes.append("rlft's vLLM engine samples within its own memory (its weights and KV cache), not in this "
                     "process's tensors")
    elif w.sample_rows:
        seq = w.prompt + w.completion
        out.append(T.kv_cache(shape.num_layers, shape.kv_dim, w.sample_rows, seq, pr.weight_b))
        out.append(T.sampling_logits(w.sample_rows, shape.vocab_size))
        out.append(T.prefill(w.sample_rows, w.prompt, shape.hidden_size, shape.intermediate_size, pr.weight_b))
        if sw > 1 and not cfg.hw.fsdp_offload_params:
            out.append(T.gathered_for_generation(shape.num_params(), pr.weight_b, sw))
    seq = w.prompt + w.completion
    if w.scoring is not None:  # no-grad passes over the whole local batch, full logits kept
        out.append(T.full_logits(w.sample_rows, seq, w.scoring.scored, shape.vocab_size, pr.compute_b,
                                 w.scoring.fp32_copies, name="rollout_logits", phase=T.SCORING, what=w.scoring.what))
    if w.scoring_hidden_states:
        out.append(T.Term("rollout_hidden", (shape.num_layers + 1) * w.sample_rows * seq * shape.hidden_size *
                          pr.compute_b, T.SCORING, f"output_hidden_states: ({shape.num_layers} + 1) x {w.sample_rows} "
                          f"rows x {seq} x H {shape.hidden_size} x {pr.compute_b} B"))
    if w.value_head:
        out.append(T.value_head(shape.hidden_size, w.sample_rows, seq))
    return out


def make_plan(cfg: RlftConfig, shape: ModelShape, device_bytes: float | None = None, device_source: str = "",
              hw: str = "", data: DataBasis | None = None, limits_why: str = "") -> Plan:
    """Every term of one device for this config and model, and how the phases combine into the peak: sequences
    from the data's lengths (`data`), or at the config's limits (None; `limits_why` says why, if asked)."""
    if device_bytes is None and not device_source:
        device_bytes, device_source = device_memory(cfg)
    world = cfg.hw.num_processes * cfg.hw.num_machines
    pr = precision(cfg)
    w = workload(cfg, world, data)
    sw, _, _, how = sharding(cfg, world)
    offload = cfg.hw.distributed_strategy == "fsdp" and cfg.hw.fsdp_offload_params
    notes = [f"per device: {how}" + ("; FSDP offloads parameters, gradients and optimizer state to "
                                     "CPU" if offload else ""),
             f"batch: {w.what}"]
    params, n_train, adapted = _parameter_terms(cfg, shape, pr, world, notes)
    out = [T.runtime(cfg.hw.device), *params, *_training_terms(cfg, shape, pr, w, adapted),
           *_sampling_terms(cfg, shape, pr, w, world, device_bytes, notes), _reference(w.reference, shape, pr, sw)]
    out += _reward_model_terms(cfg, notes)
    if w.critic_copy:
        out.append(T.critic_copy(shape.num_params(), pr.weight_b, n_train, pr.train_b, cfg.lora.enabled))
    if cfg.hw.distributed_strategy == "ddp" and world > 1:
        out.append(T.ddp_buckets(n_train, pr.train_b))
    if sw > 1 or offload:
        layer = (shape.num_params() - shape.vocab_size * shape.hidden_size * (1 if shape.tied_embeddings else 2)) \
            // shape.num_layers
        out.append(T.fsdp_gather(layer, pr.weight_b))
    adds: tuple[str, ...] = ()
    if w.sampler_copy:  # async/streaming
        out.append(T.sampler_copy(shape.num_params(), pr.weight_b, n_train if cfg.lora.enabled else 0, pr.train_b))
        notes.append("async/streaming: the sampler copy samples while the learner trains (both phases at once)")
        adds = (T.SAMPLING, T.TRAINING)
    if w.episodes:
        notes.append(f"episodes (env.name): sequences planned at train.max_seq_length {cfg.train.max_seq_length}")
    notes.append("attention planned as SDPA/flash (no seq x seq scores kept); " + sequences_note(data, limits_why))
    if cfg.hw.device == "cpu":
        adds = (T.SAMPLING, T.SCORING, T.TRAINING)
        out.append(T.allocator(sum(t.bytes for t in out if t.phase != T.ALWAYS)))
    return Plan(cfg.stage, hw or cfg.hw.name, cfg.hw.device, world, pr.name, shape, out, device_bytes,
                device_source, notes, adds, data, limits_why, planned_tokens(w))


RM_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def _reward_model_terms(cfg: RlftConfig, notes: list[str]) -> list[T.Term]:
    """The weights of each `reward_model` reward scored on the policy's device (its config.json read, no torch);
    one term per model, as the reward loads each path once."""
    import json
    from pathlib import Path

    from rlft.plan.model_shape import ShapeError, shape_from_config

    out, seen = [], set()
    for r in [*cfg.rewards, *cfg.eval.rewards]:
        kwargs = r.kwargs or {}
        path = kwargs.get("path")
        if r.fn != "reward_model" or not isinstance(path, str) or path in seen:
            continue
        seen.add(path)
        if kwargs.get("device") not in (None, cfg.hw.device):
            notes.append(f"reward model {path}: on {kwargs['device']}, not counted on this device")
            continue
        try:
            config = json.loads((Path(path).expanduser() / "config.json").read_text())
            n = shape_from_config(config, path).num_params()
        except (OSError, ValueError, ShapeError):
            notes.append(f"reward model {path}: no readable config.json here (a hub id, or not trained yet), not "
                         "counted")
            continue
        dtype = str(config.get("dtype") or config.get("torch_dtype") or "float32")
        out.append(T.reward_model(n, RM_DTYPE_BYTES.get(dtype, 4), path))
    return out


def planned_tokens(w: MemoryProfile) -> dict[str, int]:
    """The token lengths the plan used: the training row, and the sampled prompt and completion."""
    out = {"train_sequence": w.train_seq}
    if w.sample_rows:
        out.update(prompt=w.prompt, completion=w.completion)
    return out


def sequences_note(data: DataBasis | None, limits_why: str) -> str:
    if data is not None:
        return "sequences from the data, capped by the config's limits: " + data.describe()
    return "sequences at the config's limits" + (f" ({limits_why})" if limits_why else "")
