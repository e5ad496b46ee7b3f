"""`train.learning_rate: auto` (tinker's get_lr) and `train.lr_batch_reference` (LR ∝ √batch), resolved
at validation from the model's config.json, with the derivation shown by `show-config --explain`."""

import json
import math

import pytest

from conftest import ROOT
from rlft.config import ConfigError, compose, validate
from rlft.config.lr import auto_learning_rate

DEMO = ROOT / "configs" / "examples" / "grpo_demo.yaml"


def check(*overrides):
    composed = compose("grpo", "cpu", [DEMO], list(overrides))
    cfg, _ = validate(composed)
    return cfg, composed


def test_worked_numbers():
    # Llama-3.1-8B: hidden 4096, LoRA: 5e-5 * 10 * (2000/4096)^0.781 = 5e-4 * 0.57128 = 2.8564e-4
    assert auto_learning_rate(4096, "llama", lora=True) == pytest.approx(2.8564e-4, rel=1e-4)
    # Qwen2.5-7B: hidden 3584, full fine-tuning, half the rate for RL
    assert auto_learning_rate(3584, "qwen", lora=False, rl_factor=0.5) == pytest.approx(
        0.5 * 5e-5 * (2000 / 3584) ** 0.0775)


def test_auto_reads_a_local_config_and_explains(tmp_path):
    model = tmp_path / "my-llama"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 2048}))
    cfg, composed = check(f"model.name_or_path={model}", "train.learning_rate=auto", "train.rl_lr_factor=0.5")
    assert cfg.train.learning_rate == pytest.approx(5e-5 * 10 * (2000 / 2048) ** 0.781 * 0.5)
    assert composed.layer_of("train.learning_rate").startswith("auto = 5e-5 x 10 (LoRA) x (2000/2048)^0.781 (llama)")


def test_batch_reference_scales_any_rate():
    cfg, composed = check("train.learning_rate=1e-3", "train.lr_batch_reference=4")  # demo: 16 completions per step
    assert cfg.train.learning_rate == pytest.approx(1e-3 * math.sqrt(16 / 4))
    assert "sqrt(16 effective batch / 4 lr_batch_reference)" in composed.layer_of("train.learning_rate")


def test_auto_errors_say_why(tmp_path):
    with pytest.raises(ConfigError) as exc:
        check(f"model.name_or_path={tmp_path / 'missing'}", "train.learning_rate=auto")
    assert "needs the model's hidden size" in str(exc.value) and "got str" not in str(exc.value)
    model = tmp_path / "gpt"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "gpt2", "hidden_size": 768}))
    with pytest.raises(ConfigError, match="calibrated for Llama and Qwen models only"):
        check(f"model.name_or_path={model}", "train.learning_rate=auto")
