"""The memory terms of a training run as pure formulas: plain numbers in, bytes (and the formula with its
inputs, for the report) out. `estimate.py` picks the inputs from the config and model shape.

Byte sizes: fp32 4, bf16/fp16 2. Shapes: rows x sequence (tokens) x width. Every formula states what it
counts; where the count follows a library's code path (TRL's fused LM head, PEFT's fp32 adapters), the
comment names it.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1024 ** 3
MIB = 1024 ** 2
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}

# Phases: `always` terms are held for the whole run; the peak adds the largest (or, with async sampling,
# the overlapping) phase on top.
ALWAYS, SAMPLING, SCORING, TRAINING = "always", "sampling", "scoring", "training"

# TRL's fused LM head (trl.kernels.chunked_logprob) projects tiles of at most this many tokens x vocabulary
# columns instead of the whole logits tensor
FUSED_TOKEN_TILE = 4096
FUSED_VOCAB_TILE = 32768
# without Triton (CPU) its backward folds a tile in torch: up to 8 fp32 tile-sized temporaries at once
# (tile.float(), z, log_p, p, grad, the target mask as float, and two products: `_backward_tile`)
FUSED_CPU_TEMPORARIES = 8


@dataclass(frozen=True)
class Term:
    """One memory term of a plan: its bytes, the phase that holds it and its formula."""
    name: str
    bytes: float
    phase: str
    formula: str

    @property
    def gib(self) -> float:
        return self.bytes / GIB


def _n(x: float) -> str:
    return f"{int(x):,}"


def dtype_name(nbytes: int) -> str:
    return "fp32" if nbytes == 4 else "16-bit"


def weights(n_params: int, nbytes: int, shard: int = 1) -> Term:
    """The model's parameters as loaded (frozen under LoRA), divided over `shard` ranks (FSDP, ZeRO-3)."""
    per = f" / {shard} ranks" if shard > 1 else ""
    return Term("weights", n_params * nbytes / shard, ALWAYS,
                f"{_n(n_params)} params x {nbytes} B ({dtype_name(nbytes)}){per}")


def lora_params(n: int, r: int, modules: list[str], layers: int, nbytes: int = 4, shard: int = 1) -> Term:
    """LoRA A (r x in) and B (out x r) per adapted linear; PEFT keeps adapters in fp32 (autocast_adapter_dtype)."""
    per = f" / {shard} ranks" if shard > 1 else ""
    return Term("lora", n * nbytes / shard, ALWAYS,
                f"{_n(n)} params = r {r} x (in + out) of {len(modules)} modules ({', '.join(modules)}) x {layers} "
                f"layers, x {nbytes} B{per}")


def gradients(n_trainable: int, nbytes: int, shard: int = 1) -> Term:
    """One gradient per trainable parameter, in its dtype; freed after each optimizer step (set_to_none)."""
    per = f" / {shard} ranks" if shard > 1 else ""
    return Term("gradients", n_trainable * nbytes / shard, TRAINING,
                f"{_n(n_trainable)} trainable params x {nbytes} B{per}")


EIGHT_BIT = {"adamw_8bit", "paged_adamw_8bit", "adamw_bnb_8bit"}


def optimizer_state(optim: str, n_trainable: int, nbytes: int, matrices: list[tuple[int, ...]], shard: int = 1) -> Term:
    """AdamW: 2 states (exp_avg, exp_avg_sq) in the parameter's dtype; bitsandbytes 8-bit: 2 x 1 B plus an fp32
    absmax per 256-value block; Adafactor (transformers' defaults: no first moment): a row and a column vector
    per matrix; SGD without momentum: none. `matrices`: (rows, cols) or (rows, cols, how many)."""
    per = f" / {shard} ranks" if shard > 1 else ""
    if optim in EIGHT_BIT:
        b = 2 * (1 + 4 / 256)
        text = f"{_n(n_trainable)} trainable params x 2 states x (1 B + 4 B / 256 block){per}"
        if optim.startswith("paged"):
            text += "; paged: spills to CPU memory under pressure"
        return Term("optimizer", n_trainable * b / shard, ALWAYS, text)
    if optim == "adafactor":
        n = sum((m[0] + m[1] if m[1] > 1 else m[0]) * (m[2] if len(m) > 2 else 1) for m in matrices)
        return Term("optimizer", n * 4 / shard, ALWAYS, f"{_n(n)} factored second-moment values (rows + cols per "
                    f"matrix) x 4 B{per}")
    if optim == "sgd":
        return Term("optimizer", 0, ALWAYS, "SGD without momentum keeps no state")
    text = f"{_n(n_trainable)} trainable params x 2 states x {nbytes} B{per}"
    if optim == "paged_adamw_32bit":
        text += "; paged: spills to CPU memory under pressure"
    return Term("optimizer", n_trainable * 2 * nbytes / shard, ALWAYS, text)


def master_copies(n_trainable: int, param_bytes: int, compute_bytes: int, deepspeed: bool, shard: int = 1) -> Term:
    """Mixed precision's extra copy of the trained parameters: DeepSpeed keeps an fp32 master copy of 16-bit
    parameters; with fp32 parameters under a 16-bit autocast, torch caches a 16-bit cast of each trained weight
    for the forward and backward. HF Trainer keeps no fp32 master of 16-bit weights (they train in 16-bit)."""
    if deepspeed and compute_bytes < 4:
        per = f" / {shard} ranks" if shard > 1 else ""
        return Term("master_copies", n_trainable * 4 / shard, ALWAYS,
                    f"DeepSpeed fp32 master: {_n(n_trainable)} trainable params x 4 B{per}")
    if param_bytes == 4 and compute_bytes < 4:
        return Term("master_copies", n_trainable * compute_bytes, TRAINING,
                    f"fp32 trained params are the master copy; autocast's 16-bit weight cache: {_n(n_trainable)} "
                    f"x {compute_bytes} B")
    if compute_bytes == 4:
        return Term("master_copies", 0, TRAINING, "no mixed precision (fp32): no extra copy")
    return Term("master_copies", 0, TRAINING, "16-bit trained params, no fp32 master (HF Trainer)")


# a decoder layer's linears: the tensor each reads (shared by the modules of one group) and that tensor's width
LINEAR_GROUPS = {"q_proj": "attn_in", "k_proj": "attn_in", "v_proj": "attn_in", "o_proj": "attn_out",
                 "gate_proj": "mlp_in", "up_proj": "mlp_in", "down_proj": "mlp_mid"}


def layer_activation_bytes(hidden: int, q_dim: int, kv_dim: int, heads: int, inter: int, act_b: int, resid_b: int,
                           lora_r: dict[str, int] | None = None, full: bool = False, autocast: bool = False,
                           dropout: bool = False, mask_b: int = 1, experts_per_token: int = 1) -> float:
    """Bytes one decoder layer keeps for backward, per token (Llama/Qwen layout, SDPA/flash attention), counted
    from the tensors autograd saves (checked against torch.autograd.graph.saved_tensors_hooks on SmolLM2-135M):

      norms   2 x 4 H                 each RMSNorm's fp32 input (its own input when that is fp32 already)
      attn    act_b (2 q + 2 kv)      rotated q and k, v, the attention output (o_proj reads it in place),
              + 4 heads               and its fp32 logsumexp
      mlp     act_b 3 I               gate, SiLU(gate), up
      inputs  per group of linears    a trained linear keeps its input: the shared tensor once (normed hidden
                                      resid_b H, the MLP product act_b I), or its own copy where a dtype cast
                                      (autocast, PEFT's fp32 adapters) or LoRA dropout makes one: act_b x in
                                      (+ the dropout mask: mask_b = 1 B per value from CUDA's fused
                                      dropout, 4 B from the CPU path's fp32 noise); frozen linears keep nothing
      lora    act_b r per adapter     the A projection's output

    `lora_r`: adapted module -> rank (LoRA); `full`: every linear trains (full fine-tuning). The MLP's
    width counts experts_per_token times for MoE."""
    lora_r = lora_r or {}
    h, k = hidden, experts_per_token
    width = {"attn_in": h, "attn_out": q_dim, "mlp_in": h, "mlp_mid": inter}
    in_b = {"attn_in": resid_b, "attn_out": act_b, "mlp_in": resid_b, "mlp_mid": act_b}
    shared = {"attn_in": resid_b * h, "attn_out": 0, "mlp_in": resid_b * h, "mlp_mid": act_b * inter}
    total = 2 * 4 * h + act_b * (2 * q_dim + 2 * kv_dim) + 4 * heads + act_b * 3 * inter * k
    keeps_shared: set[str] = set()
    for module, group in LINEAR_GROUPS.items():
        reps = k if group.startswith("mlp") else 1
        n_in = width[group]
        if full:  # the base linear keeps its input; autocast casts an fp32 input to a 16-bit copy first
            if autocast and in_b[group] != act_b:
                total += reps * act_b * n_in
            else:
                keeps_shared.add(group)
        elif module in lora_r:  # PEFT casts a 16-bit input to the adapter's fp32; autocast casts it to 16-bit for A
            saved_b = act_b if autocast else 4
            if dropout or autocast or in_b[group] != 4:
                total += reps * (saved_b * n_in + (mask_b * n_in if dropout else 0))
            else:
                keeps_shared.add(group)
        if module in lora_r:
            total += reps * act_b * lora_r[module]
    total += sum(shared[g] * (k if g.startswith("mlp") else 1) for g in keeps_shared)
    return total


def activations(tokens: int, layers: int, per_layer: float, resid_b: int, hidden: int, checkpointing: bool,
                head_tokens: int, act_b: int) -> Term:
    """Training micro-batch activations kept for backward.
    Without checkpointing: tokens x layers x per-layer bytes. With it (non-reentrant, per layer): each layer's
    input (tokens x layers x resid_b H) plus one layer recomputed in backward (tokens x per-layer bytes).
    Both add the final norm (4 H + resid_b H per token) and the LM head's input (act_b H per scored token)."""
    tail = tokens * (4 + resid_b) * hidden + head_tokens * act_b * hidden
    if checkpointing:
        b = tokens * layers * resid_b * hidden + tokens * per_layer + tail
        text = (f"checkpointing: {_n(tokens)} tokens x ({layers} layers x {resid_b} B x H {hidden} + one layer "
                f"{per_layer / 1024:.1f} KiB/token) + final norm and LM-head input")
    else:
        b = tokens * layers * per_layer + tail
        text = (f"{_n(tokens)} tokens x {layers} layers x {per_layer / 1024:.1f} KiB/token/layer + final norm "
                f"and LM-head input")
    return Term("activations", b, TRAINING, text)


def fused_head(scored_tokens: int, vocab: int, hidden: int, compute_b: int, triton: bool, head_trains: bool) -> Term:
    """TRL's fused LM head (GRPO, DPO, SFT, AWR): log-probs from tiles of at most 4096 tokens x 32768 vocabulary
    columns, never the whole logits. One tile buffer in the compute dtype (+ the fp32 temporaries of its torch
    fallback without Triton), the fp32 gradient of the hidden states, and an fp32 weight gradient when the LM
    head trains."""
    tile = min(scored_tokens, FUSED_TOKEN_TILE) * min(vocab, FUSED_VOCAB_TILE)
    extra = 0 if triton else FUSED_CPU_TEMPORARIES * 4
    b = tile * (compute_b + extra) + scored_tokens * hidden * 4 + (vocab * hidden * 4 if head_trains else 0)
    text = (f"fused LM head: tile {_n(min(scored_tokens, FUSED_TOKEN_TILE))} x {_n(min(vocab, FUSED_VOCAB_TILE))} x "
            f"({compute_b} B" + (f" + {FUSED_CPU_TEMPORARIES} fp32 temporaries without Triton" if extra else "") +
            f") + hidden grad {_n(scored_tokens)} x {hidden} x 4 B" +
            (f" + LM-head grad {vocab} x {hidden} x 4 B" if head_trains else ""))
    return Term("logits", b, TRAINING, text)


def full_logits(rows: int, seq: int, scored: int, vocab: int, compute_b: int, fp32_copies: int, name: str = "logits",
                phase: str = TRAINING, what: str = "") -> Term:
    """Logits materialised whole: rows x seq x vocab in the compute dtype, plus `fp32_copies` fp32 tensors of
    rows x scored x vocab (TRL/rlft upcast the scored positions before log_softmax)."""
    b = rows * seq * vocab * compute_b + fp32_copies * rows * scored * vocab * 4
    return Term(name, b, phase, f"{what}{rows} rows x {seq} x vocab {_n(vocab)} x {compute_b} B + {fp32_copies} fp32 "
                                f"x {rows} x {scored} x {_n(vocab)}")


def kv_cache(layers: int, kv_dim: int, rows: int, seq: int, nbytes: int) -> Term:
    """Sampling's KV cache: 2 (K and V) x layers x kv heads x head dim x rows x (prompt + completion) tokens."""
    return Term("kv_cache", 2 * layers * kv_dim * rows * seq * nbytes, SAMPLING,
                f"2 x {layers} layers x {kv_dim} (kv heads x head dim) x {rows} rows x {seq} tokens x {nbytes} B")


# generate keeps the last position's logits and the sampling processors' copies: an fp32 copy, temperature,
# top-p (sorted values + int64 indices), softmax probabilities, and rlft's recorded log_softmax
SAMPLING_LOGIT_BYTES = 32


def sampling_logits(rows: int, vocab: int) -> Term:
    return Term("sampling_logits", rows * vocab * SAMPLING_LOGIT_BYTES, SAMPLING,
                f"{rows} rows x vocab {_n(vocab)} x {SAMPLING_LOGIT_BYTES} B (last-position logits and the "
                f"sampling processors' fp32 copies)")


def prefill(rows: int, prompt: int, hidden: int, inter: int, nbytes: int) -> Term:
    """The prompt's forward pass without grad: one layer's largest tensors at a time (hidden state, gate, up and
    SiLU outputs) for every prompt token."""
    return Term("prefill", rows * prompt * (2 * hidden + 3 * inter) * nbytes, SAMPLING,
                f"{rows} rows x {prompt} prompt tokens x (2 H + 3 I) x {nbytes} B, one layer at a time")


def reference(n_params: int, nbytes: int, separate: bool, why: str, shard: int = 1) -> Term:
    """The frozen reference: a second copy of the weights, or nothing when it is the adapter-disabled policy."""
    if not separate:
        return Term("reference", 0, ALWAYS, why)
    per = f" / {shard} ranks" if shard > 1 else ""
    return Term("reference", n_params * nbytes / shard, ALWAYS, f"{why}: {_n(n_params)} params x {nbytes} B{per}")


def reward_model(n_params: int, nbytes: int, path: str) -> Term:
    """A `reward_model` reward's weights, held on the policy's device for the whole run (loaded once, scored
    under no_grad: its activations are one batch's and small beside the policy's)."""
    return Term("reward_model", n_params * nbytes, ALWAYS, f"reward model {path}: {_n(n_params)} params x {nbytes} B")


def value_head(hidden: int, rows: int, seq: int) -> Term:
    """PPO's critic: Linear(H, 1) in fp32 with its gradient and two AdamW states, and the values per token."""
    params = hidden + 1
    return Term("value_head", params * 4 * 4 + rows * seq * 4, ALWAYS,
                f"{_n(params)} params x (4 B + grad 4 B + 2 x 4 B AdamW) + values {rows} x {seq} x 4 B")


def critic_copy(n_params: int, nbytes: int, n_trainable: int, train_b: int, lora: bool) -> Term:
    """PPO's separate critic (ppo.value_model: separate): a second copy of the weights, its trainable params (its
    LoRA's, or all of them) with their gradients and two AdamW states."""
    extra = n_trainable * train_b if lora else 0
    return Term("critic", n_params * nbytes + extra + n_trainable * 3 * train_b, ALWAYS,
                f"{_n(n_params)} params x {nbytes} B + {_n(n_trainable)} trainable x {train_b} B x "
                f"({'param + ' if lora else ''}grad + 2 AdamW)")


def vllm_share(utilization: float, device_bytes: float | None, mode: str) -> Term:
    """A colocated vLLM reserves gpu_memory_utilization x device memory (its weights and KV cache) for the run."""
    if mode != "colocate":
        return Term("vllm", 0, ALWAYS, "vLLM server mode: on its own GPU, not this one")
    if device_bytes is None:
        return Term("vllm", 0, ALWAYS, f"{utilization:g} x device memory (unknown: set hw.device_memory_gb)")
    return Term("vllm", utilization * device_bytes, ALWAYS,
                f"vllm_gpu_memory_utilization {utilization:g} x {device_bytes / GIB:.0f} GiB")


def rlft_engine(device: str, utilization: float, device_bytes: float | None, kv_cache_gib: int, n_params: int,
                weight_b: int) -> Term:
    """rlft's own vLLM engine (sampling.backend vllm): on CUDA its gpu_memory_utilization share of the device; on a
    CPU its own copy of the weights plus the KV cache it is given (VLLM_CPU_KVCACHE_SPACE = sampling.kv_cache_gib)."""
    if device == "cuda":
        if device_bytes is None:
            return Term("vllm_engine", 0, ALWAYS, f"sampling.gpu_memory_utilization {utilization:g} x device memory "
                                                  "(unknown: set hw.device_memory_gb)")
        return Term("vllm_engine", utilization * device_bytes, ALWAYS,
                    f"sampling.gpu_memory_utilization {utilization:g} x {device_bytes / GIB:.0f} GiB")
    return Term("vllm_engine", n_params * weight_b + kv_cache_gib * GIB, ALWAYS,
                f"its weights {_n(n_params)} params x {weight_b} B + sampling.kv_cache_gib {kv_cache_gib} GiB of KV "
                "cache")


def ddp_buckets(n_trainable: int, nbytes: int) -> Term:
    """DDP's reducer copies gradients into flat buckets for the all-reduce (gradient_as_bucket_view is off)."""
    return Term("ddp_buckets", n_trainable * nbytes, ALWAYS, f"{_n(n_trainable)} trainable params x {nbytes} B")


def fsdp_gather(layer_params: int, nbytes: int, layers_in_flight: int = 2) -> Term:
    """FSDP gathers one wrapped layer's full parameters at a time, and prefetches the next."""
    return Term("fsdp_gather", layer_params * nbytes * layers_in_flight, ALWAYS,
                f"{layers_in_flight} layers x {_n(layer_params)} params x {nbytes} B (gathered, prefetched)")


def gathered_for_generation(n_params: int, nbytes: int, shard: int) -> Term:
    """TRL samples from the whole model: sharded weights are gathered on every rank while generating."""
    return Term("generation_gather", n_params * nbytes * (shard - 1) / shard, SAMPLING,
                f"{_n(n_params)} params x {nbytes} B x ({shard} - 1) / {shard}, while sampling")


def sampler_copy(n_params: int, nbytes: int, n_trainable: int, trainable_b: int) -> Term:
    """Async/streaming sampling keeps a second copy of the policy for the sampler thread."""
    return Term("sampler_copy", n_params * nbytes + n_trainable * trainable_b, ALWAYS,
                f"{_n(n_params)} x {nbytes} B + {_n(n_trainable)} trainable x {trainable_b} B")


# Resident memory of a CPU training process before the model loads: RSS of
# `python -c "import torch, transformers, peft; from trl import GRPOTrainer, DPOTrainer, SFTTrainer"` (trl imports
# its trainers lazily; they pull in datasets and accelerate), torch 2.13 CPU, transformers 5.24, TRL 1.16,
# PEFT 0.21, Python 3.11, Linux x86-64: 467 MiB (466.6-466.9 over runs; torch, transformers, trl, peft alone: 375).
CPU_PROCESS_BASELINE = 467 * MIB
# CUDA context and cuBLAS workspace of torch 2.x with lazy module loading: a typical figure, not measured here
CUDA_CONTEXT = 512 * MIB


# Peak RssAnon growth over peak malloc in-use growth (glibc mallinfo2, sampled every 1 ms) across LoRA
# forward/backward/AdamW steps of SmolLM2-135M in fp32 with TRL's fused LM head, torch 2.13 CPU: 1.42-1.47
# over four batch shapes (16x48, 16x48 x 3 steps, 8x96, 32x24 tokens). glibc keeps freed blocks.
CPU_ALLOCATOR_FACTOR = 1.45


def allocator(phase_bytes: float) -> Term:
    """CPU only: what glibc holds beyond the live tensors at the peak."""
    return Term("allocator", (CPU_ALLOCATOR_FACTOR - 1) * phase_bytes, ALWAYS,
                f"({CPU_ALLOCATOR_FACTOR} - 1) x the phases' {phase_bytes / GIB:.3f} GiB (glibc keeps freed blocks; "
                f"measured)")


def runtime(device: str) -> Term:
    if device == "cuda":
        return Term("runtime", CUDA_CONTEXT, ALWAYS, "CUDA context + cuBLAS workspace (typical, ~0.5 GiB)")
    return Term("runtime", CPU_PROCESS_BASELINE, ALWAYS,
                "process baseline: torch + transformers + TRL + PEFT imported, 467 MiB RSS (measured)")
