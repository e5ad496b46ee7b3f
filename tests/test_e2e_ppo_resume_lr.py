"""PPO resumed with --allow-config-change train.learning_rate: the new rate is what the optimizer steps at (the
checkpoint's optimizer and scheduler state kept the old one), as on the TRL stages."""

import pytest

from conftest import ROOT, read_jsonl, run_cli

pytestmark = pytest.mark.e2e


def _train(out, *extra):
    return run_cli("train", "--stage", "ppo", "--hw", "cpu", "-c", str(ROOT / "configs/examples/ppo_demo.yaml"),
                   f"train.output_dir={out}", "ppo.eval_interval=800", "ppo.save_interval=32", "ppo.log_interval=16",
                   "data.eval_prompts=0", "ppo.max_tokens=8", "train.lr_scheduler_type=constant",
                   "train.warmup_ratio=0", *extra)


def test_ppo_resume_applies_a_changed_learning_rate(tmp_path):
    out = tmp_path / "run"
    first = _train(out, "ppo.num_episodes=32")
    assert first.returncode == 0, first.stderr[-3000:]
    res = _train(out, "ppo.num_episodes=48", "train.learning_rate=6e-3", "--resume", "--allow-config-change")
    assert res.returncode == 0, res.stderr[-3000:]
    rows = [r for r in read_jsonl(out / "metrics.jsonl") if "learning_rate" in r and "reward" in r]
    assert [r["step"] for r in rows] == [1, 2, 3], rows
    assert rows[1]["learning_rate"] == pytest.approx(3e-3) and rows[2]["learning_rate"] == pytest.approx(6e-3), rows
    assert "learning rate 0.003 -> 0.006" in res.stderr and "0.003 -> 0.006 (schedule" in res.stderr, res.stderr[-2000:]
