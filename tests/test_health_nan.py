"""A NaN that TRL logs reaches the health rules as NaN (metrics.jsonl still writes null): a broken run stops."""

import json
import math
from types import SimpleNamespace

from conftest import ROOT
from rlft.monitor.health import evaluate_rules
from rlft.monitor.metrics import MetricsWriter


class _Seen:
    def __init__(self):
        self.records = []

    def check(self, record, control, write=True):
        self.records.append(record)


def _cfg():
    from rlft.config.compose import compose
    from rlft.config.validate import validate

    return validate(compose("grpo", "cpu", [ROOT / "configs/examples/grpo_demo.yaml"], []))[0]


def test_nan_loss_and_grad_norm_fire_their_rules(tmp_path):
    seen = _Seen()
    writer = MetricsWriter(tmp_path / "metrics.jsonl", "grpo", health=seen)
    state = SimpleNamespace(global_step=1, is_world_process_zero=True)
    writer.on_log(None, state, None, logs={"loss": float("nan"), "grad_norm": float("nan"), "reward": 0.5})
    row = json.loads((tmp_path / "metrics.jsonl").read_text())
    assert row["loss"] is None and row["grad_norm"] is None and row["reward"] == 0.5
    record = seen.records[0]
    assert math.isnan(record["loss"]) and math.isnan(record["grad_norm"])
    rules = {f.rule for f in evaluate_rules(record, _cfg())}
    assert {"loss_nan", "grad_norm_nan"} <= rules


def test_a_loss_not_measured_fires_nothing(tmp_path):
    seen = _Seen()
    writer = MetricsWriter(tmp_path / "metrics.jsonl", "grpo", health=seen)
    writer.on_log(None, SimpleNamespace(global_step=1, is_world_process_zero=True), None, logs={"reward": 0.5})
    assert not {"loss_nan", "grad_norm_nan"} & {f.rule for f in evaluate_rules(seen.records[0], _cfg())}
