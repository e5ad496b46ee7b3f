"""What an evaluation counts and where `rlft eval` reads and writes: a reward that raises while evaluating is
counted in the eval numbers (summary.json, metrics.jsonl's eval rows, eval_completions.jsonl) and said once on the
console; `rlft eval` takes the run's `eval:` section when no flag says otherwise and resolves a relative `-o` before
any reward code runs."""

import json

import pytest

from conftest import read_jsonl, run_cli

pytestmark = pytest.mark.e2e
DEMO = "configs/examples/grpo_demo.yaml"
RAISING = "tests/fixtures/raising_reward.py:boom"


def test_a_reward_that_raises_during_eval_is_counted_and_said_once(tmp_path):
    out = tmp_path / "run"
    res = run_cli("train", "--stage", "grpo", "--hw", "cpu", "-c", DEMO, f"train.output_dir={out}", "train.max_steps=2",
                  "data.eval_prompts=2", "grpo.eval_every=1", f"eval.rewards=[{{fn: '{RAISING}', name: boom}}]")
    assert res.returncode == 0, res.stderr[-3000:]
    ev = json.loads((out / "summary.json").read_text())["eval"]
    for part in ("start", "end"):
        assert ev[part]["reward_failures"] == {"char_fraction": 0, "boom": 2 * 8}, ev[part]
        assert ev[part]["per_reward"]["boom"] is None and ev[part]["n"] == 16  # the total leaves eval rewards out
    rows = [r for r in read_jsonl(out / "metrics.jsonl") if "eval_reward" in r]
    assert rows and all(r["eval_rewards/boom/errors"] == 16 and r["eval_rewards/char_fraction/errors"] == 0
                        for r in rows), rows
    samples = read_jsonl(out / "eval_completions.jsonl")
    assert samples and all(s["reward_failures"] == ["boom"] for s in samples), samples[:2]
    said = [line for line in res.stderr.splitlines() if "gave no score to 16 of 16 samples" in line]
    assert len(said) == 1 and "reward 'boom'" in said[0] and "reward_failures" in said[0], res.stderr[-3000:]
    assert "raising reward: fails on purpose" in said[0]
