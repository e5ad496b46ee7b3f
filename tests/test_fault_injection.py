"""Fault injection is a test fixture (tests/fault_cli.py), not production code: rlft reads no RLFT_FAULT_*
variable, and every fault the launcher patches in still finds the rlft method it wraps."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

from conftest import ROOT

import fault_cli


def test_rlft_reads_no_test_only_variable():
    hits = [f"{p.relative_to(ROOT)}:{i}" for p in sorted((ROOT / "rlft").rglob("*.py"))
            for i, line in enumerate(p.read_text().splitlines(), 1) if "RLFT_FAULT" in line]
    assert not hits, f"test-only fault variables belong in tests/fault_cli.py: {hits}"


def test_every_fault_installs_on_its_target(monkeypatch, tmp_path):
    from rlft.monitor.callbacks import InterruptCallback
    from rlft.monitor.metrics import MetricsWriter
    from rlft.stages.common.samples_log import SamplesLog

    targets = [(MetricsWriter, "_carry_batch_metrics"), (SamplesLog, "append"), (InterruptCallback, "on_step_begin")]
    before = [getattr(cls, name) for cls, name in targets]
    for (cls, name), fn in zip(targets, before):
        monkeypatch.setattr(cls, name, fn)  # restored after the test
    env = {fault_cli.NAN_LOSS_AT_STEP: "2", fault_cli.SIGTERM_AFTER_PROMPTS: "4", fault_cli.SLEEP_AT_STEP: "3:0"}
    assert fault_cli.install(env) == list(fault_cli.FAULTS)
    assert all(getattr(cls, name) is not fn for (cls, name), fn in zip(targets, before))

    writer = MetricsWriter(tmp_path / "metrics.jsonl", "grpo")
    for step in (1, 2, 3):
        writer.on_log(None, SimpleNamespace(global_step=step, is_world_process_zero=True), None, logs={"loss": 0.5})
    losses = [json.loads(line)["loss"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert losses[0] == losses[2] == 0.5 and math.isnan(losses[1])  # step 2 only, once
