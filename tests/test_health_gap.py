"""The train-up/eval-flat rule: training reward rising while the held-out eval reward does not is flagged once,
with both gains in the message; an eval that rises with training, or a run too short to judge, is not."""

import json
from types import SimpleNamespace

import pytest

from conftest import ROOT, RecordingConsole
from rlft.monitor.health import HealthMonitor, train_eval_gap


def test_gap_worked_numbers():
    rising = [0.1] * 5 + [0.5] * 5  # the last 5 steps average 0.4 above the first 5
    assert train_eval_gap(rising, 0.2, 0.25, 0.1) == pytest.approx((0.4, 0.05))  # eval +0.05 < 0.25 x 0.4: flagged
    assert train_eval_gap(rising, 0.2, 0.35, 0.1) is None                       # eval +0.15 >= 0.1: it learns
    assert train_eval_gap(rising, 0.2, 0.1, 0.1) == pytest.approx((0.4, -0.1))  # eval falls: flagged
    assert train_eval_gap([0.1] * 5 + [0.15] * 5, 0.2, 0.2, 0.1) is None        # training gained 0.05 only
    assert train_eval_gap(rising[:9], 0.2, 0.2, 0.1) is None                     # fewer than 2 x 5 steps
    assert train_eval_gap(rising, None, 0.2, 0.1) is None                        # no eval at the start
    assert train_eval_gap(rising, 0.2, 0.2, 0.0) is None                         # rule off


def _monitor(tmp_path):
    from rlft.config.compose import compose
    from rlft.config.validate import validate

    cfg = validate(compose("grpo", "cpu", [ROOT / "configs/examples/grpo_demo.yaml"], []))[0]
    run = SimpleNamespace(health=tmp_path / "health.jsonl")
    monitor = HealthMonitor(cfg, run, RecordingConsole())
    monitor.ctx = SimpleNamespace(eval={"start": {"reward_mean": 0.2}})
    return monitor


def test_monitor_flags_the_gap_once(tmp_path):
    monitor = _monitor(tmp_path)
    control = SimpleNamespace()
    for step in range(1, 11):
        monitor.check({"step": step, "reward": 0.1 if step <= 5 else 0.6}, control)
    monitor.check({"step": 10, "eval_reward": 0.21}, control)
    monitor.check({"step": 12, "eval_reward": 0.19}, control)
    rows = [json.loads(line) for line in (tmp_path / "health.jsonl").read_text().splitlines()]
    assert [(r["rule"], r["level"], r["step"], r["action"]) for r in rows] == [("train_up_eval_flat", "warning", 10,
                                                                             "warn")]
    assert "rose by 0.5" in rows[0]["message"] and "+0.01" in rows[0]["message"]
    assert "train_up_eval_flat" not in " ".join(monitor.console.lines[1:])


def test_eval_that_follows_training_is_quiet(tmp_path):
    monitor = _monitor(tmp_path)
    for step in range(1, 11):
        monitor.check({"step": step, "reward": 0.1 if step <= 5 else 0.6}, SimpleNamespace())
    monitor.check({"step": 10, "eval_reward": 0.6}, SimpleNamespace())
    assert not (tmp_path / "health.jsonl").exists() or not (tmp_path / "health.jsonl").read_text()
