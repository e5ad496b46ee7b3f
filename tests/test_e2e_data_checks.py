"""Inputs that used to crash mid-run are refused (or fitted) before the run folder exists."""
import json

import pytest

from conftest import read_jsonl, run_cli

pytestmark = pytest.mark.e2e
DEMO = "configs/examples/grpo_demo.yaml"


def _data(tmp_path, rows, name="train.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _train(tmp_path, data, *extra):
    out = tmp_path / "run"
    res = run_cli("train", "--stage", "grpo", "--hw", "cpu", "-c", DEMO, f"data.train={data}",
                  f"train.output_dir={out}", *extra)
    return res, out


def test_a_200kb_prompt_is_truncated_and_the_run_trains(tmp_path):
    rows = [{"prompt": "Repeat the letter z:", "target": "z"}] * 3 + [{"prompt": "x " * 100_000 + "Repeat z:",
                                                                       "target": "z"}]
    data = _data(tmp_path, rows)
    res, out = _train(tmp_path, data, "train.max_steps=2", "train.max_seq_length=64")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "1 prompt(s) longer than 48 tokens" in res.stderr and "kept the last 48 tokens of 1" in res.stderr
    assert len(read_jsonl(out / "metrics.jsonl")) == 2


def test_too_long_error_and_drop(tmp_path):
    rows = [{"prompt": "Repeat the letter z:", "target": "z"}, {"prompt": "y " * 500, "target": "y"}]
    data = _data(tmp_path, rows)
    res, out = _train(tmp_path, data, "train.max_steps=1", "train.max_seq_length=64", "data.too_long=error")
    assert res.returncode == 2, res.stderr[-3000:]
    assert "longer than 48 tokens" in res.stderr and "row 1" in res.stderr and "max_seq_length 64" in res.stderr
    assert not out.exists() and "Traceback" not in res.stderr
    # dropping the long row leaves 1 row for 2 prompts per iteration: refused, it would train nothing
    res, out = _train(tmp_path, data, "train.max_steps=1", "train.max_seq_length=64", "data.too_long=drop")
    assert res.returncode == 2 and "dropped 1" in res.stderr and "1 usable rows" in res.stderr, res.stderr[-3000:]
    assert not out.exists() and "Traceback" not in res.stderr
    data = _data(tmp_path, rows + [{"prompt": "Repeat the letter y:", "target": "y"}])
    res, out = _train(tmp_path, data, "train.max_steps=1", "train.max_seq_length=64", "data.too_long=drop")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "dropped 1" in res.stderr


def test_non_string_prompts_are_refused_before_the_run_folder(tmp_path):
    data = _data(tmp_path, [{"prompt": 5, "target": "z"}, {"prompt": 6, "target": "z"}])
    res, out = _train(tmp_path, data, "train.max_steps=1")
    assert res.returncode == 2, res.stderr[-3000:]
    assert "got int in rows 0, 1" in res.stderr
    assert not out.exists() and "Traceback" not in res.stderr


def test_missing_reward_columns_are_refused_before_the_run_folder(tmp_path):
    data = _data(tmp_path, [{"prompt": "Repeat the letter z:", "targt": "z"}] * 2)  # a whole grpo.batch_size
    # a built-in's column (from its kwargs) is already a validate-config error
    res, out = _train(tmp_path, data, "train.max_steps=1",
                      "rewards=[{fn: char_fraction}, {fn: 'tests/fixtures/column_reward.py:by_difficulty'}]")
    assert res.returncode == 2, res.stderr[-3000:]
    assert "reward `char_fraction` reads column `target`" in res.stderr and "did you mean `targt`?" in res.stderr
    assert not out.exists() and "Traceback" not in res.stderr
    # a user function's declared columns (its code is not run by validate-config) are checked before the run folder
    res, out = _train(tmp_path, data, "train.max_steps=1", "rewards=[{fn: "
                                                           "'tests/fixtures/column_reward.py:by_difficulty'}]")
    assert res.returncode == 2, res.stderr[-3000:]
    assert "reward 'by_difficulty' reads column 'difficulty'" in res.stderr
    assert not out.exists() and "Traceback" not in res.stderr


def test_max_seq_length_must_leave_room_for_the_prompt():
    res = run_cli("validate-config", "--stage", "grpo", "-c", DEMO, "train.max_seq_length=16")
    assert res.returncode == 2 and "leaves no room for the prompt" in res.stderr


@pytest.mark.parametrize("stage", ["rs_sft", "awr", "ppo"])
def test_other_sampling_stages_check_prompt_length_and_reward_columns_first(tmp_path, stage):
    rows = [{"prompt": "Repeat the letter z:", "target": "z"}, {"prompt": "y " * 500, "target": "y"}]
    data = _data(tmp_path, rows)
    out = tmp_path / "run"
    common = ["train", "--stage", stage, "--hw", "cpu", "model.name_or_path=tiny", f"data.train={data}",
              f"train.output_dir={out}", "rewards=[{fn: char_fraction}]", f"{stage}.max_tokens=16",
              "train.max_seq_length=64"]
    res = run_cli(*common, "data.too_long=error")
    assert res.returncode == 2, res.stderr[-3000:]
    assert f"minus {stage}.max_tokens 16" in res.stderr and "row 1" in res.stderr and not out.exists()
    res = run_cli(*common[:-3], "rewards=[{fn: exact_match}]", f"{stage}.max_tokens=16")
    assert res.returncode == 2, res.stderr[-3000:]
    assert "reward `exact_match` reads column `answer`" in res.stderr and not out.exists()


@pytest.mark.parametrize("stage", ["rs_sft", "ppo"])
def test_eval_prompts_are_checked_like_the_training_prompts(tmp_path, stage):
    data = _data(tmp_path, [{"prompt": "Repeat the letter z:", "target": "z"}])
    evals = _data(tmp_path, [{"prompt": "Repeat the letter y:", "target": "y"}, {"prompt": "y " * 500, "target": "y"}],
                  "eval.jsonl")
    out = tmp_path / "run"
    res = run_cli("train", "--stage", stage, "--hw", "cpu", "model.name_or_path=tiny", f"data.train={data}",
                  f"data.eval={evals}", f"train.output_dir={out}", "rewards=[{fn: char_fraction}]",
                  f"{stage}.max_tokens=16", "train.max_seq_length=64", "data.too_long=error")
    assert res.returncode == 2, res.stderr[-3000:]
    assert "data.eval: 1 prompt(s) longer than 48 tokens" in res.stderr and not out.exists()
