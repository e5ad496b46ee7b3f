"""The KL rules read the mean of the last `monitor.kl_window` logged KL values: one batch's k1 estimate that
spikes on an odd sample warns but does not stop a run; KL that stays above the limit stops it, and so does a
jump large enough to lift the window's mean over the limit on its own."""

import json
from types import SimpleNamespace

import pytest

from conftest import ROOT, RecordingConsole
from rlft.monitor.health import HealthMonitor, RunStopped, evaluate_rules


def _monitor(tmp_path, *overrides):
    from rlft.config.compose import compose
    from rlft.config.validate import validate

    cfg = validate(compose("grpo", "cpu", [ROOT / "configs/examples/grpo_demo.yaml"], list(overrides)))[0]
    return HealthMonitor(cfg, SimpleNamespace(health=tmp_path / "health.jsonl"), RecordingConsole())


def _feed(monitor, kls):
    for step, kl in enumerate(kls, 1):
        monitor.check({"step": step, "kl_policy_ref": kl}, SimpleNamespace())


def _rows(tmp_path):
    path = tmp_path / "health.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_one_spike_warns_without_stopping(tmp_path):
    monitor = _monitor(tmp_path)
    _feed(monitor, [0.1, 0.1, 0.55, 0.1, 0.1])  # window means 0.1, 0.1, 0.25, 0.25, 0.25
    rows = _rows(tmp_path)
    assert {r["rule"] for r in rows} == {"kl_high"} and rows[0]["step"] == 3
    assert rows[0]["value"] == pytest.approx(0.25) and "mean of the last 3 steps" in rows[0]["message"]


def test_sustained_kl_stops(tmp_path):
    monitor = _monitor(tmp_path)
    with pytest.raises(RunStopped, match="kl_critical at step 3"):
        _feed(monitor, [0.25, 0.33, 0.34])  # window means 0.25, 0.29, 0.307
    assert _rows(tmp_path)[-1]["value"] == pytest.approx(0.92 / 3)


def test_a_jump_stops_at_once(tmp_path):
    monitor = _monitor(tmp_path)
    with pytest.raises(RunStopped, match="kl_critical at step 3"):
        _feed(monitor, [0.05, 0.05, 2.0])  # mean 0.7


def test_window_one_reads_each_value(tmp_path):
    monitor = _monitor(tmp_path, "monitor.kl_window=1")
    with pytest.raises(RunStopped, match="kl_critical at step 3"):
        _feed(monitor, [0.1, 0.1, 0.55])


def test_a_lone_record_is_read_as_it_is(tmp_path):
    cfg = _monitor(tmp_path).cfg
    assert [f.rule for f in evaluate_rules({"kl_policy_ref": 0.31}, cfg)] == ["kl_critical"]
    assert evaluate_rules({"kl_policy_ref": 0.31, "kl_policy_ref_window": 0.1}, cfg) == []
