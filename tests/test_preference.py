"""Preference stages without training: schedule arithmetic, rlft keys -> TRL DPO/ORPO configs,
label smoothing as conservative DPO, and eval records in metrics.jsonl."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from rlft.config import load_config
from rlft.config.render import lr_schedule, schedule_summary, trainer_schedule
from rlft.monitor.metrics import REQUIRED, normalise

REPO = Path(__file__).resolve().parents[1]
DEMO_DATA = str(REPO / "configs" / "examples" / "data" / "preference_demo.jsonl")


def test_lr_schedule_matches_the_staged_guide():
    # 1000 samples, batch 1, accumulation 16, 3 epochs, warmup 0.1 -> 187 steps, 18 warmup
    assert lr_schedule(1000, 1, 16, 3, 0.1) == (187, 18)
    assert lr_schedule(1000, 1, 16, 3, 0.1, num_processes=2) == (93, 9)


def test_trainer_schedule_counts_partial_accumulation():
    assert trainer_schedule(1000, 1, 16, 3, 0.1) == (189, 19)
    assert trainer_schedule(64, 8, 1, 1, 0.0) == (8, 0)


def test_schedule_summary_with_the_dataset_size():
    cfg, _, _ = load_config("dpo", "cpu", overrides=["train.per_device_train_batch_size=1",
                                                     "train.gradient_accumulation_steps=16"])
    text = schedule_summary(cfg, num_samples=1000)
    assert "total_steps = 1000 / 16 x 3 epochs = 187" in text and "warmup_steps = 0.1 x 187 = 18" in text
    assert "189 steps, 19 warmup" in text


@pytest.mark.parametrize("stage", ["dpo", "orpo"])
def test_demo_configs_validate_for_training(stage, monkeypatch):
    monkeypatch.chdir(REPO)  # the demo data path is relative to the repository root
    _, _, warnings = load_config(stage, "cpu", files=[REPO / "configs" / "examples" / f"{stage}_demo.yaml"],
                                 for_train=True)
    assert warnings == []


def _dpo_config(tmp_path, *overrides):
    pytest.importorskip("trl")
    from rlft.stages.dpo.runner import dpo_trl_config

    cfg, _, _ = load_config("dpo", "cpu", overrides=list(overrides))
    return dpo_trl_config(cfg, str(tmp_path))


def test_dpo_config_maps_rlft_keys(tmp_path):
    args = _dpo_config(tmp_path, "dpo.beta=0.2", "dpo.max_length=256", "dpo.max_prompt_length=64",
                       "dpo.loss_type=ipo", "train.learning_rate=3e-5")
    assert args.beta == 0.2 and args.loss_type == ["ipo"] and args.learning_rate == 3e-5
    assert args.max_length == 256
    assert args.eval_strategy == "no"
    assert args.bf16 is False and args.use_cpu


def test_dpo_max_length_is_capped_by_the_hardware_context(tmp_path):
    args = _dpo_config(tmp_path, "dpo.max_length=4096")  # the cpu profile has train.max_seq_length 512
    assert args.max_length == 512


def test_dpo_eval_every_eval_steps_when_eval_data_is_set(tmp_path):
    args = _dpo_config(tmp_path, f"data.eval={DEMO_DATA}", "train.eval_steps=7")
    assert args.eval_strategy == "steps" and args.eval_steps == 7


def test_trl_passthrough_goes_last(tmp_path):
    args = _dpo_config(tmp_path, "trl.precompute_ref_log_probs=true")
    assert args.precompute_ref_log_probs is True


def test_trl_objection_is_a_config_error_naming_the_key(tmp_path):
    from rlft.config import ConfigError

    with pytest.raises(ConfigError, match="rejected the settings") as info:
        _dpo_config(tmp_path, "trl.load_best_model_at_end=true")  # no data.eval: no eval strategy to match
    assert info.value.problems[0].key == "trl.load_best_model_at_end"


def test_label_smoothing_on_sigmoid_is_conservative_dpo(tmp_path):
    args = _dpo_config(tmp_path, "dpo.label_smoothing=0.1")
    assert args.loss_type == ["sigmoid", "robust"] and args.label_smoothing == 0.1
    w_sigmoid, w_robust = args.loss_weights
    # TRL 1.16's sigmoid and robust per-pair losses; their weighted sum must equal cDPO for any margin
    e = 0.1
    for x in (-3.0, -0.5, 0.0, 0.7, 4.0):
        logsig = lambda z: -math.log1p(math.exp(-z))  # noqa: E731
        sigmoid = -logsig(x)
        robust = (-(1 - e) * logsig(x) + e * logsig(-x)) / (1 - 2 * e)
        cdpo = -(1 - e) * logsig(x) - e * logsig(-x)
        assert w_sigmoid * sigmoid + w_robust * robust == pytest.approx(cdpo)


def test_label_smoothing_on_robust_is_passed_through(tmp_path):
    args = _dpo_config(tmp_path, "dpo.label_smoothing=0.2", "dpo.loss_type=robust")
    assert args.loss_type == ["robust"] and args.label_smoothing == 0.2 and args.loss_weights is None


def test_orpo_config_maps_rlft_keys(tmp_path):
    pytest.importorskip("trl")
    from rlft.stages.orpo.runner import orpo_trl_config

    cfg, _, _ = load_config("orpo", "cpu", overrides=["orpo.beta=0.05", "orpo.max_length=128",
                                                      "orpo.max_prompt_length=64", f"data.eval={DEMO_DATA}"])
    args = orpo_trl_config(cfg, str(tmp_path))
    assert args.beta == 0.05 and args.max_length == 128 and args.eval_strategy == "steps"
    assert args.remove_unused_columns is False


def test_orpo_import_is_silent():
    import subprocess
    import sys

    code = "import warnings; warnings.simplefilter('error'); import rlft.trainers.orpo_compat"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "trl.experimental" not in res.stderr


def test_preference_stages_are_registered_and_orpo_is_experimental():
    from rlft.config.stages import SPECS

    assert SPECS["dpo"].runner and SPECS["orpo"].runner and SPECS["orpo"].experimental and not SPECS["dpo"].experimental


@pytest.mark.parametrize("stage", ["dpo", "orpo"])
def test_train_records_carry_the_required_keys(stage):
    record = normalise({"loss": 0.69, "learning_rate": 1e-3}, stage)
    assert all(key in record for key in REQUIRED[stage])
    assert "log_odds_ratio" in REQUIRED["orpo"]


def test_eval_records_keep_only_their_own_keys():
    record = normalise({"eval_loss": 0.5, "eval_rewards/accuracies": 1.0, "epoch": 1.0}, "dpo")
    assert record == {"eval_loss": 0.5, "eval_rewards/accuracies": 1.0, "epoch": 1.0}
