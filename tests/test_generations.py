"""Steps a user can read: validate-config says when max_steps trains every step on one sampled generation."""

import pytest

from conftest import ROOT, run_cli

DEMO = ROOT / "configs" / "examples" / "grpo_demo.yaml"


def test_max_steps_within_one_generation_warns_with_the_arithmetic():
    res = run_cli("validate-config", "--stage", "grpo", "-c", DEMO, "train.max_steps=8", "grpo.num_substeps=2",
                  "grpo.ppo_epochs=4")
    assert res.returncode == 0
    assert "8 step(s) sample only 1 generation(s)" in res.stderr and "2 x 4 = 8 optimizer steps" in res.stderr
    assert "at least 16" in res.stderr


def test_two_generations_or_more_say_nothing():
    res = run_cli("validate-config", "--stage", "grpo", "-c", DEMO, "train.max_steps=16", "grpo.num_substeps=2",
                  "grpo.ppo_epochs=4")
    assert res.returncode == 0 and "generation(s)" not in res.stderr


def test_each_metrics_row_names_its_generation_and_reuse(tmp_path):
    import json
    from types import SimpleNamespace

    from rlft.monitor.metrics import MetricsWriter, generation_of

    assert [generation_of(s, 4) for s in (1, 4, 5)] == [
        {"generation": 1, "reused_generation": False}, {"generation": 1, "reused_generation": True},
        {"generation": 2, "reused_generation": False}]
    writer = MetricsWriter(tmp_path / "m.jsonl", "grpo", steps_per_generation=2)
    for step in (1, 2, 3):
        writer.on_log(None, SimpleNamespace(global_step=step, is_world_process_zero=True), None,
                      logs={"loss": 0.1, "reward": 0.5} if step != 2 else {"loss": 0.1})
    rows = [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert [(r["generation"], r["reused_generation"]) for r in rows] == [(1, False), (1, True), (2, False)]
    assert rows[1]["reward"] == 0.5  # the generation's reward, carried and marked as reused


def test_the_off_policy_rule_fires_on_fresh_samples_only():
    from rlft.config.schema import MonitorConfig
    from rlft.monitor.health import RULES

    rule, m = RULES["sampler_learner_mismatch"], MonitorConfig()
    assert rule({"kl_sample_train_v2": 0.5, "reused_generation": True}, m) == []
    fired = rule({"kl_sample_train_v2": 0.5, "reused_generation": False}, m)
    assert fired and "freshly sampled" in fired[0].message


@pytest.mark.e2e
def test_a_grpo_run_logs_generations_and_the_console_says_reused(tmp_path):
    import json

    out = tmp_path / "run"
    res = run_cli("train", "--stage", "grpo", "-c", DEMO, f"train.output_dir={out}", "train.max_steps=4",
                  "grpo.num_substeps=2", "grpo.ppo_epochs=1", "data.eval_prompts=0")
    assert res.returncode == 0, res.stderr[-2000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [(r["generation"], r["reused_generation"]) for r in rows] == [(1, False), (1, True), (2, False), (2, True)]
    assert "gen 2 (reused)" in res.stderr
