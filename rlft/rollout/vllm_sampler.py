"""`sampling.backend: vllm`: completions drawn by a vLLM engine running inside the training process.

The engine is created once per process, lazily (the first sync), from the policy's own config with dummy weights,
then sent the policy's weights: whatever the policy is (a hub model, an init_from chain, a LoRA adapter), the engine
samples exactly it. After that every `sync(model)` pushes the weights again when they changed since the last push
(LoRA merged into a copy of the base weights, rlft.models.merged), in place through vLLM's layer-wise
`reload_weights` (on CPU vLLM packs each linear weight for oneDNN, so a plain `load_weights` has nothing to copy
into), then repacks a tied lm_head (the reload does not) and drops the prefix cache (its KV entries were computed
with the old weights).

With `sampling.lora_sync: adapter` (the default on CUDA) a LoRA policy's base weights are pushed once and each
update sends only the adapter, saved by PEFT and handed to vLLM as a LoRA request under a new id (vLLM caches
adapters by id): no merge and a few MB a push instead of the whole model. On CPU vLLM's LoRA kernels sample about
2.7x slower than merged weights (../research notes: 5.8 against 15.7 tokens/s), so `auto` merges there.

Log-probs: `logprobs=0` returns the drawn token's log-prob; `logprobs_mode="processed_logprobs"` takes it after
the temperature, as the hf backend records log softmax(logits / T). (After top_p < 1 too: vLLM then renormalises
over the nucleus, which the hf backend does not; rlft's defaults keep top_p 1.)

`import vllm` (seconds) happens only here, on the first engine: validate-config and --help never import it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from rlft import world
from rlft.config.sampling import cpu_attention_problem
from rlft.errors import RunError
from rlft.models.merged import merged_weights, weights_fingerprint
from rlft.rollout.sample import Rollouts, SamplingParams, _left_pad, render_prompt
from rlft.rollout.sampling_settings import Progress, SamplerSettings
from rlft.data.messages import as_text

__all__ = ["VLLMSampler", "engine_of", "shutdown_engine"]


@dataclass
class _Engine:
    llm: Any
    key: tuple
    folder: Any           # the TemporaryDirectory holding the config vLLM was built from
    max_model_len: int
    lora_rank: int | None = None  # the largest adapter rank the engine serves; None: LoRA merged into the weights
    pushed: tuple | None = None   # (id(model), fingerprint) of the weights the engine holds
    pushes: int = 0
    base_of: int | None = None    # adapter sync: id() of the model whose base weights the engine holds
    lora: Any = None              # adapter sync: the LoRA request of the adapter last pushed
    adapter_dir: str | None = None  # adapter sync: where that adapter was saved (PEFT puts a named one below)


_ENGINE: _Engine | None = None  # one per process: an engine costs seconds to start and a share of memory


def _dtype_name(model, settings: SamplerSettings) -> str:
    if settings.vllm_dtype != "auto":
        return settings.vllm_dtype
    dtype = next(model.parameters()).dtype
    return {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}.get(dtype, "float32")


def _hf_config(model):
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base.config


# config fields that differ between loads of one model (a trainer turns the KV cache off while it trains) and
# mean nothing to the engine: the same engine keeps serving
_NOT_ARCHITECTURE = ("_name_or_path", "transformers_version", "use_cache", "dtype", "torch_dtype",
                     "_attn_implementation", "_attn_implementation_autoset", "output_attentions",
                     "output_hidden_states", "return_dict", "_commit_hash")


# the adapter ranks vLLM serves (its LoRAConfig.max_lora_rank choices)
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def lora_request_problem(model) -> str | None:
    """Why vLLM cannot sample this policy's updates from its LoRA adapter alone (as a LoRA request), or None."""
    configs = getattr(model, "peft_config", None)
    active = getattr(model, "active_adapter", None)
    cfg = configs.get(active) if isinstance(configs, dict) and isinstance(active, str) else None
    if cfg is None or str(getattr(cfg, "peft_type", "")).rsplit(".", 1)[-1] != "LORA":
        return "the policy has no LoRA adapter"
    unsupported = [what for what, on in (("DoRA", getattr(cfg, "use_dora", False)),
                                         ("modules_to_save", getattr(cfg, "modules_to_save", None)),
                                         ("a bias", getattr(cfg, "bias", "none") != "none"),
                                         ("rank_pattern", getattr(cfg, "rank_pattern", None)),
                                         ("alpha_pattern", getattr(cfg, "alpha_pattern", None)),
                                         (f"rank {cfg.r} (vLLM: at most {VLLM_LORA_RANKS[-1]})",
                                          cfg.r > VLLM_LORA_RANKS[-1])) if on]
    if unsupported:
        return f"vLLM's LoRA serves no {', '.join(unsupported)}"
    for name, p in model.named_parameters():
        if "lora_embedding" in name:
            return "the adapter adapts an embedding"
        if p.requires_grad and ".lora_A." not in name and ".lora_B." not in name:
            return f"`{name}` trains besides the adapter"
    return None


def servable_lora_rank(model) -> int | None:
    """The active LoRA adapter's rank when vLLM can sample the policy from it alone (`lora_request_problem`)."""
    return None if lora_request_problem(model) is not None else model.peft_config[model.active_adapter].r


def _engine_lora_rank(model, settings: SamplerSettings) -> int | None:
    """The max_lora_rank to start the engine with when `sampling.lora_sync` sends this policy as an adapter."""
    mode = settings.lora_sync
    if mode == "auto":
        mode = "adapter" if next(model.parameters()).device.type == "cuda" else "merged"
    if mode != "adapter":
        return None
    # a policy whose adapter comes later (RS-SFT/AWR sample the plain policy before their first round trains it)
    # starts the engine the adapter will need: no second engine at round 2
    rank = servable_lora_rank(model) if getattr(model, "peft_config", None) else settings.lora_rank
    return None if rank is None else min(r for r in VLLM_LORA_RANKS if r >= rank)


def _engine_key(model, settings: SamplerSettings) -> tuple:
    cfg = _hf_config(model).to_dict()
    for k in _NOT_ARCHITECTURE:
        cfg.pop(k, None)
    import json

    return (json.dumps(cfg, sort_keys=True, default=str), _dtype_name(model, settings), settings.enforce_eager,
            settings.max_model_len, settings.kv_cache_gib, settings.gpu_memory_utilization, settings.seed,
            _engine_lora_rank(model, settings))


@contextlib.contextmanager
def _rng_kept():
    """The process's random streams (Python, NumPy, torch) as they were: vLLM's worker seeds them all at start,
    which would move the training run's own draws (minibatch order, a resumed run's restored state)."""
    import random

    import numpy as np

    py, npy = random.getstate(), np.random.get_state()
    cuda = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=cuda):
        try:
            yield
        finally:
            random.setstate(py)
            np.random.set_state(npy)


def _start_engine(model, settings: SamplerSettings) -> _Engine:
    """A vLLM engine in this process with the policy's architecture and dummy weights (sync sends the real ones)."""
    device = next(model.parameters()).device
    config = _hf_config(model)
    problem = cpu_attention_problem(config.to_dict()) if device.type == "cpu" else None
    if problem:
        raise RunError(f"sampling.backend vllm: {problem}")
    folder = tempfile.TemporaryDirectory(prefix="rlft-vllm-")
    config.to_json_file(os.path.join(folder.name, "config.json"))
    limit = getattr(config, "max_position_embeddings", None) or 4096
    max_len = min(settings.max_model_len or limit, limit)
    # in-process engine (external_launcher): vLLM's torch.distributed rendezvous reads these; a single process here
    world.default_to_one_process()
    if "MASTER_PORT" not in os.environ:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    extra: dict = {}
    if device.type == "cpu":
        # the KV cache's size on CPU (GiB); without it vLLM asks for a share of the node's whole RAM
        os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(settings.kv_cache_gib)
    else:
        extra["gpu_memory_utilization"] = settings.gpu_memory_utilization
    lora_rank = _engine_lora_rank(model, settings)
    if lora_rank is not None:  # one adapter at a time: the policy's latest
        extra.update(enable_lora=True, max_lora_rank=lora_rank, max_loras=1)
    elif settings.lora_sync == "adapter":
        logging.getLogger("rlft").warning("sampling.lora_sync adapter: %s, so the engine gets merged weights",
                                          lora_request_problem(model))
    # vLLM logs every engine step at INFO on the run's console; its warnings and errors still show
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    try:
        from vllm import LLM

        with _rng_kept():
            llm = LLM(model=folder.name, skip_tokenizer_init=True, load_format="dummy",
                      dtype=_dtype_name(model, settings), enforce_eager=settings.enforce_eager,
                      max_model_len=max_len, seed=settings.seed, distributed_executor_backend="external_launcher",
                      logprobs_mode="processed_logprobs", generation_config="vllm",
                      max_num_batched_tokens=max(4096, max_len), **extra)
    except Exception as exc:  # noqa: BLE001 - vLLM's own reason, as one line: an unsupported model or setting
        folder.cleanup()
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[-1]
        instead = "sampling.lora_sync merged (no vLLM LoRA) or " if lora_rank is not None else ""
        raise RunError(f"sampling.backend vllm: vLLM could not start an engine for this model ({reason}); use "
                       f"{instead}sampling.backend hf") from exc
    return _Engine(llm=llm, key=_engine_key(model, settings), folder=folder, max_model_len=max_len,
                   lora_rank=lora_rank)


def engine_of(model, settings: SamplerSettings) -> _Engine:
    """The process's engine for this policy and settings, started on first use (a different architecture or
    setting replaces it)."""
    global _ENGINE
    key = _engine_key(model, settings)
    if _ENGINE is not None and _ENGINE.key != key:
        shutdown_engine()
    if _ENGINE is None:
        _ENGINE = _start_engine(model, settings)
    return _ENGINE


def shutdown_engine() -> None:
    """Drop the process's engine (the next sync starts a new one)."""
    global _ENGINE
    if _ENGINE is None:
        return
    engine, _ENGINE = _ENGINE, None
    try:
        engine.llm.llm_engine.engine_core.shutdown()
    except Exception:  # noqa: BLE001 - best effort: the process may be ending
        pass
    engine.folder.cleanup()
    import gc

    del engine
    gc.collect()


def _model_runner(llm):
    worker = llm.llm_engine.model_executor.driver_worker
    return getattr(worker, "worker", worker).model_runner


def push_weights(engine: _Engine, model) -> None:
    """The policy's weights into the engine, in place: LoRA merged, or with adapter sync the base weights (once per
    model) and the adapter as a LoRA request."""
    adapter = engine.lora_rank is not None and servable_lora_rank(model) is not None
    if not adapter or engine.base_of != id(model):
        _reload(engine, model, merged_weights(model, merge=not adapter))
        engine.base_of = id(model) if adapter else None
    engine.lora = _save_adapter(engine, model) if adapter else None
    engine.pushes += 1


def _save_adapter(engine: _Engine, model):
    """The policy's active adapter saved by PEFT into the engine's folder, as a LoRA request with a new id (the
    previous adapter's files go: vLLM has loaded them)."""
    import shutil

    from vllm.lora.request import LoRARequest

    n = engine.pushes + 1
    path = os.path.join(engine.folder.name, f"adapter-{n}")
    name = model.active_adapter
    # save_embedding_layers "auto" would look the base model up on the Hub at every push: the base goes by push
    model.save_pretrained(path, selected_adapters=[name], save_embedding_layers=False)
    if engine.adapter_dir is not None:
        shutil.rmtree(engine.adapter_dir, ignore_errors=True)
    engine.adapter_dir = path
    return LoRARequest(lora_name=f"policy-{n}", lora_int_id=n,
                       lora_path=path if name == "default" else os.path.join(path, name))


def _reload(engine: _Engine, model, weights) -> None:
    runner = _model_runner(engine.llm)
    runner.reload_weights(weights_iterator=weights)
    lm_head = getattr(runner.model, "lm_head", None)
    if getattr(_hf_config(model), "tie_word_embeddings", False) and lm_head is not None \
            and hasattr(getattr(lm_head, "quant_method", None), "process_weights_after_loading"):
        # a tied lm_head is packed apart from the embedding it shares, and the reload does not pack it again
        lm_head.quant_method.process_weights_after_loading(lm_head)
    engine.llm.reset_prefix_cache()


class VLLMSampler:
    """Samples through the process's vLLM engine; `sync(model)` sends it the policy's weights when they changed."""

    backend = "vllm"

    def __init__(self, settings: SamplerSettings, tokenizer):
        self.settings, self.tokenizer = settings, tokenizer
        self.engine: _Engine | None = None
        self.eos: list[int] = []

    def sync(self, model) -> None:
        self.engine = engine_of(model, self.settings)
        stamp = (id(model), weights_fingerprint(model))
        pushed = self.engine.pushed
        if pushed is None or pushed[0] != stamp[0] or not torch.equal(pushed[1], stamp[1]):
            push_weights(self.engine, model)
            self.engine.pushed = stamp
        gen = getattr(model, "generation_config", None)
        eos = getattr(gen, "eos_token_id", None) if gen is not None else None
        if eos is None:
            eos = self.tokenizer.eos_token_id
        self.eos = [e for e in (eos if isinstance(eos, (list, tuple)) else [eos]) if e is not None]

    def sample(self, prompts: Sequence[Any], params: SamplingParams, n: int, progress: Progress | None = None,
               prompt_ids: Sequence[Any] | None = None) -> Rollouts:
        if self.engine is None:
            raise RuntimeError("VLLMSampler.sample before sync(model)")
        if n < 1:
            raise ValueError(f"n must be at least 1, got {n}")
        prompts = list(prompts)
        if not prompts:
            raise ValueError("no prompts to sample from")
        ids = list(range(len(prompts))) if prompt_ids is None else list(prompt_ids)
        if len(ids) != len(prompts):
            raise ValueError(f"{len(ids)} prompt ids for {len(prompts)} prompts")
        from vllm import SamplingParams as VSP
        from vllm.inputs import TokensPrompt

        tok = self.tokenizer
        pad_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        tokenized = [render_prompt(tok, p) for p in prompts]
        limit = self.engine.max_model_len
        requests, settings = [], []
        for i, p_ids in enumerate(tokenized):
            room = limit - len(p_ids)
            if room < 1:
                raise RunError(f"a prompt of {len(p_ids)} tokens leaves no room to sample within vLLM's max_model_len "
                               f"{limit}; raise sampling.max_model_len (or train.max_seq_length)")
            for j in range(n):
                row = i * n + j
                requests.append(TokensPrompt(prompt_token_ids=p_ids))
                settings.append(VSP(
                    n=1, temperature=0.0 if params.greedy else params.temperature,
                    top_p=1.0 if params.greedy else params.top_p, top_k=0,
                    max_tokens=min(params.max_new_tokens, room), logprobs=0, stop_token_ids=list(self.eos),
                    seed=None if params.seed is None else params.seed + row, detokenize=False))
        outs = self.engine.llm.generate(requests, settings, use_tqdm=False, lora_request=self.engine.lora)
        if progress is not None:
            progress(len(requests), len(requests))
        rows_ids, rows_lp, finished = [], [], []
        for out in outs:
            o = out.outputs[0]
            t_ids = list(o.token_ids)
            lps = [next(iter(d.values())).logprob if len(d) == 1 else d[t].logprob
                   for t, d in zip(t_ids, o.logprobs or [])]
            done = o.finish_reason == "stop"
            if done and (not t_ids or t_ids[-1] not in self.eos) and self.eos:
                # (defensive) an engine that leaves the stop token out: the layout keeps it, as generate does
                t_ids.append(self.eos[0])
                lps.append(0.0)
            rows_ids.append(t_ids)
            rows_lp.append(lps)
            finished.append(done)
        T = max(1, max(len(r) for r in rows_ids))
        completion_ids_BT = torch.full((len(rows_ids), T), pad_id, dtype=torch.long)
        completion_mask_BT = torch.zeros((len(rows_ids), T), dtype=torch.long)
        logprobs_BT = torch.zeros((len(rows_ids), T), dtype=torch.float32)
        for b, (r, lp) in enumerate(zip(rows_ids, rows_lp)):
            if r:
                completion_ids_BT[b, :len(r)] = torch.tensor(r, dtype=torch.long)
                completion_mask_BT[b, :len(r)] = 1
                logprobs_BT[b, :len(lp)] = torch.tensor(lp, dtype=torch.float32)
        prompt_ids_BP, prompt_mask_BP = _left_pad(tokenized, pad_id)
        prompt_ids_BP, prompt_mask_BP = prompt_ids_BP.repeat_interleave(n, 0), prompt_mask_BP.repeat_interleave(n, 0)
        texts = [tok.decode(r, skip_special_tokens=True) for r in rows_ids]
        return Rollouts(
            prompts=prompts, prompt_texts=[as_text(p) for p in prompts], prompt_ids=ids, n=n,
            prompt_index=[i for i in range(len(prompts)) for _ in range(n)],
            prompt_ids_BP=prompt_ids_BP, prompt_mask_BP=prompt_mask_BP, completion_ids_BT=completion_ids_BT,
            completion_mask_BT=completion_mask_BT, logprobs_BT=logprobs_BT, completions=texts, finished=finished,
            max_new_tokens=params.max_new_tokens,
        )
