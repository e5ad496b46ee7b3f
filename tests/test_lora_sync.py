"""`sampling.lora_sync`: which LoRA policies vLLM can sample from their adapter alone (a LoRA request), and why
the others are merged (rlft/rollout/vllm_sampler.py; the engine runs themselves are in tests/test_vllm.py)."""

from __future__ import annotations

import pytest
import torch

from rlft.rollout.vllm_sampler import VLLM_LORA_RANKS, lora_request_problem, servable_lora_rank


@pytest.fixture(scope="module")
def base():
    from transformers import AutoModelForCausalLM

    from rlft.tiny import ensure_tiny_model

    return AutoModelForCausalLM.from_pretrained(str(ensure_tiny_model(num_heads=2)), dtype=torch.float32)


def _peft(base, **lora):
    import copy

    from peft import LoraConfig, get_peft_model

    return get_peft_model(copy.deepcopy(base), LoraConfig(**{"r": 8, "target_modules": "all-linear", **lora}))


def test_a_plain_lora_adapter_is_served_at_its_rank(base):
    model = _peft(base, r=12)
    assert lora_request_problem(model) is None and servable_lora_rank(model) == 12
    assert min(r for r in VLLM_LORA_RANKS if r >= 12) == 16  # the engine's max_lora_rank for it


@pytest.mark.parametrize("lora, reason", [
    ({"use_dora": True}, "DoRA"),
    ({"modules_to_save": ["lm_head"]}, "modules_to_save"),
    ({"bias": "lora_only"}, "a bias"),
    ({"rank_pattern": {"q_proj": 4}}, "rank_pattern"),
])
def test_what_vllm_cannot_serve_is_merged_with_its_reason(base, lora, reason):
    model = _peft(base, **lora)
    assert reason in lora_request_problem(model) and servable_lora_rank(model) is None


def test_a_policy_without_an_adapter_or_with_more_training_is_merged(base):
    assert lora_request_problem(base) == "the policy has no LoRA adapter"
    model = _peft(base)
    model.base_model.model.model.norm.weight.requires_grad_(True)
    assert "trains besides the adapter" in lora_request_problem(model)


def test_the_engine_gets_lora_support_before_the_adapter_exists(base):
    """RS-SFT and AWR sample the plain policy before their first round adds the adapter: with `adapter` sync the
    engine starts with the rank the config's adapter will need (lora.r rounded up to a rank vLLM serves), so round
    2 does not start a second engine; `auto` on a CPU merges, and an adapter vLLM cannot serve gets no LoRA."""
    from types import SimpleNamespace

    from rlft.rollout.sampling_settings import SamplerSettings
    from rlft.rollout.vllm_sampler import _engine_lora_rank

    cfg = SimpleNamespace(sampling=SimpleNamespace(backend="vllm", vllm_dtype="auto", enforce_eager=True,
                                                   max_model_len=None, kv_cache_gib=1, gpu_memory_utilization=0.3,
                                                   lora_sync="adapter"),
                          train=SimpleNamespace(max_seq_length=256, seed=0),
                          lora=SimpleNamespace(enabled=True, r=12, bias="none"))
    settings = SamplerSettings.from_config(cfg)
    assert settings.lora_rank == 12
    assert _engine_lora_rank(base, settings) == 16  # the plain policy of round 1
    assert _engine_lora_rank(_peft(base, r=12), settings) == 16  # round 2's: the same engine
    assert _engine_lora_rank(_peft(base, use_dora=True), settings) is None
    cfg.lora.bias = "all"
    assert SamplerSettings.from_config(cfg).lora_rank is None
    cfg.sampling.lora_sync = "auto"
    assert _engine_lora_rank(_peft(base), SamplerSettings.from_config(cfg)) is None  # CPU: merged
