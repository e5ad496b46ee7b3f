"""Preference stages' eval: fresh samples scored by the run's rewards at the start and the end (summary.json's
eval.start / eval.end, as the sampling stages) and the last held-out preference accuracy."""

import json

import pytest

from conftest import ROOT, run_cli
from rlft.stages.common.preference_eval import last_logged

EXAMPLES = ROOT / "configs" / "examples"
ONE_LETTER = "rewards=[{fn: char_fraction, kwargs: {char: a}}]"  # the pairs carry no `target` column: one letter


def test_last_logged_takes_the_last_number_of_a_key():
    history = [{"loss": 1.0}, {"eval_rewards/accuracies": 0.5}, {"loss": 0.5}, {"eval_rewards/accuracies": 0.75},
               {"train_runtime": 3.0}]
    assert last_logged(history, "eval_rewards/accuracies") == 0.75
    assert last_logged(history, "eval_loss") is None


@pytest.mark.e2e
def test_dpo_with_rewards_and_eval_pairs_reports_reward_and_accuracy(tmp_path):
    out = tmp_path / "run"
    data = EXAMPLES / "data" / "preference_demo.jsonl"
    res = run_cli("train", "--stage", "dpo", "--hw", "cpu", "-c", EXAMPLES / "dpo_demo.yaml", f"train.output_dir={out}",
                  ONE_LETTER, f"data.eval={data}", "data.eval_prompts=4", "train.max_steps=2", "train.eval_steps=2")
    assert res.returncode == 0, res.stderr[-3000:]
    ev = json.loads((out / "summary.json").read_text())["eval"]
    assert isinstance(ev["start"]["reward_mean"], float) and isinstance(ev["end"]["reward_mean"], float)
    assert ev["start"]["prompts"] == 4 and ev["start"]["n"] == ev["end"]["n"] == 16
    assert ev["start"]["eval_set"] == ev["end"]["eval_set"]
    assert 0.0 <= ev["end"]["preference_accuracy"] <= 1.0
    assert "rlft: eval: mean reward" in res.stderr and "held-out preference accuracy" in res.stderr


@pytest.mark.e2e
def test_a_reward_column_the_preference_data_lacks_exits_2_before_the_run_folder(tmp_path):
    out = tmp_path / "run"
    res = run_cli("train", "--stage", "orpo", "--hw", "cpu", "-c", EXAMPLES / "orpo_demo.yaml",
                  f"train.output_dir={out}", "rewards=[{fn: char_fraction}]")  # reads a `target` column
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-3000:]
    assert "target" in res.stderr and "data.train" in res.stderr
    assert not out.exists()
