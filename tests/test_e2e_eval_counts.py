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


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A one-step GRPO run whose config sets `eval:` (3 samples per prompt of at most 4 new tokens)."""
    out = tmp_path_factory.mktemp("trained") / "run"
    res = run_cli("train", "--stage", "grpo", "--hw", "cpu", "-c", DEMO, f"train.output_dir={out}", "train.max_steps=1",
                  "data.eval_prompts=0", "data.eval=demo", "eval.samples_per_prompt=3", "eval.max_new_tokens=4",
                  "eval.temperature=0.5")
    assert res.returncode == 0, res.stderr[-3000:]
    return out


def test_rlft_eval_samples_as_the_runs_eval_section_says_unless_a_flag_says_otherwise(trained, tmp_path):
    res = run_cli("eval", trained, "--max-prompts", "2", "-o", tmp_path / "a.jsonl")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "2 prompts x 3 = 6 completions (3 samples of ≤4 tokens at T=0.5)" in res.stdout, res.stdout
    rows = read_jsonl(tmp_path / "a.jsonl")
    assert len(rows) == 6
    res = run_cli("eval", trained, "--max-prompts", "2", "-n", "2", "-o", tmp_path / "b.jsonl")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "2 prompts x 2 = 4 completions (2 samples of ≤4 tokens at T=0.5)" in res.stdout, res.stdout
    res = run_cli("eval", trained, "--max-prompts", "2", "eval.greedy=true", "eval.samples_per_prompt=null", "-o",
                  tmp_path / "c.jsonl")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "2 prompts x 1 = 2 completions (1 sample of ≤4 tokens greedy)" in res.stdout, res.stdout


WANDER = """
import os

def wander(prompts, completions, **kw):
    os.chdir(os.environ["RLFT_TEST_ELSEWHERE"])
    raise ValueError("wandered off")
"""


def test_rlft_eval_writes_a_relative_out_where_the_command_was_given(trained, tmp_path):
    """A relative -o is resolved once, before any reward code runs: a reward that chdirs into a folder holding a
    file of that name does not get it replaced; its failures are counted on the console."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "out.jsonl").write_text("precious\n")
    (tmp_path / "rw.py").write_text(WANDER)
    (tmp_path / "cfg.yaml").write_text("rewards: [{fn: char_fraction}, {fn: rw.py:wander, weight: 0.0}]\n")
    res = run_cli("eval", trained, "-c", "cfg.yaml", "--data", "demo", "--max-prompts", "2", "-n", "1", "-o",
                  "out.jsonl", cwd=tmp_path, env={"RLFT_TEST_ELSEWHERE": str(elsewhere)})
    assert res.returncode == 0, res.stderr[-3000:]
    assert (elsewhere / "out.jsonl").read_text() == "precious\n"
    assert len(read_jsonl(tmp_path / "out.jsonl")) == 2
    assert "rows written to out.jsonl" in res.stdout
    line = next(x for x in res.stdout.splitlines() if x.strip().startswith("wander"))
    assert "(2 completions it failed to score)" in line, res.stdout
