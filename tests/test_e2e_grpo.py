"""End-to-end GRPO runs through the CLI on the built-in tiny model (CPU)."""

import json
import statistics

import pytest

from conftest import read_jsonl, run_cli

pytestmark = pytest.mark.e2e
DEMO = "configs/examples/grpo_demo.yaml"
REQUIRED = ["step", "reward", "reward_std", "rewards/char_fraction/mean", "frac_constant_groups", "kl_sample_train_v1",
            "kl_sample_train_v2", "kl_policy_ref", "kl_coef", "entropy", "completion_length", "grad_norm",
            "learning_rate"]


def test_demo_learns(tmp_path):
    out = tmp_path / "run"
    res = run_cli("train", "--stage", "grpo", "--hw", "cpu", "-c", DEMO, f"train.output_dir={out}")
    assert res.returncode == 0, res.stderr[-3000:]
    every = read_jsonl(out / "metrics.jsonl")
    rows = [r for r in every if "eval_reward" not in r]  # training rows, one per step
    assert [r["step"] for r in rows] == list(range(1, 61))
    # grpo.eval_every unset: the held-out eval every 60 // 5 = 12 steps (not at the last: eval.end measures it)
    evals = [r for r in every if "eval_reward" in r]
    assert [r["step"] for r in evals] == [12, 24, 36, 48] and evals[-1]["eval_reward"] > evals[0]["eval_reward"]
    first = statistics.fmean(r["reward"] for r in rows[:10])
    last = statistics.fmean(r["reward"] for r in rows[-10:])
    # thresholds below the worst of 3 seeds x 2 kernels (scripts/bench_demos.py --demos grpo): first 0.015-0.018,
    # last 0.883-0.985 (the training reward samples at temperature 1.0), held-out eval at the end 0.979-0.990
    assert first < 0.1 and last > 0.8, (first, last)
    assert json.loads((out / "summary.json").read_text())["eval"]["end"]["reward_mean"] > 0.9
    assert (out / "final" / "adapter_config.json").is_file()
    assert (out / "config.yaml").is_file() and (out / "completions.jsonl").is_file()
    fired = {h["rule"] for h in read_jsonl(out / "health.jsonl")}
    assert "entropy_collapse" not in fired, fired  # the demo learns; its low entropy is the answer, not a collapse
    assert all(isinstance(r["time"], float) and r["stage"] == "grpo" for r in rows)
    assert [r["time"] for r in every] == sorted(r["time"] for r in every)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stage"] == "grpo" and summary["status"] == "finished" and summary["steps"] == 60
    assert summary["last"]["reward"] == rows[-1]["reward"] and summary["wall_s"] > 0


@pytest.mark.parametrize("overrides", [
    ["grpo.baseline_mode=group_mean_std", "grpo.remove_constant_reward_groups=true"],
    ["grpo.baseline_mode=leave_one_out", "grpo.kl_penalty_coef=0.05", "grpo.kl_penalty_mode=loss",
     "grpo.adaptive_kl=true"],
    ["grpo.baseline_mode=global_mean", "grpo.kl_penalty_coef=0.05", "grpo.kl_penalty_mode=advantage",
     "grpo.kl_discount_factor=0.5", "grpo.num_substeps=2"],
    ["grpo.baseline_mode=group_mean", "grpo.kl_penalty_coef=0.1", "grpo.adaptive_kl=true", "grpo.loss_fn=ppo",
     "grpo.ppo_epochs=2"],
    ["grpo.kl_penalty_coef=0.05", "grpo.kl_penalty_mode=advantage"],
], ids=["group_mean_std+filter", "loo+kl_loss", "global+kl_adv_discount", "group_mean+adaptive_kl_adv+ppo",
        "kl_adv_on_policy"])
def test_modes_run_and_write_metrics(tmp_path, overrides):
    out = tmp_path / "run"
    res = run_cli("train", "--stage", "grpo", "--hw", "cpu", "-c", DEMO, f"train.output_dir={out}",
                  "train.max_steps=4", *overrides)
    assert res.returncode == 0, res.stderr[-3000:]
    rows = read_jsonl(out / "metrics.jsonl")
    assert len(rows) == 4
    for row in rows:
        missing = [k for k in REQUIRED if k not in row]
        assert not missing, missing
    if any("kl_penalty_coef" in o for o in overrides):
        assert all(r["kl_policy_ref"] is not None for r in rows)
        assert all(r["kl_coef"] > 0 for r in rows)
    if "grpo.adaptive_kl=true" in overrides:
        assert rows[-1]["kl_coef"] != rows[0]["kl_coef"]  # the controller moved the coefficient


def test_failing_reward_does_not_kill_the_run(tmp_path):
    out = tmp_path / "run"
    cfg = tmp_path / "flaky.yaml"
    cfg.write_text("rewards:\n  - fn: char_fraction\n  - fn: tests/fixtures/flaky_reward.py:flaky\n    weight: 0.5\n"
                   "monitor:\n  log_completions: -1\n  max_reward_failure_fraction: 1.0\n")
    res = run_cli("train", "--stage", "grpo", "--hw", "cpu", "-c", DEMO, "-c", cfg, f"train.output_dir={out}",
                  "train.max_steps=6")
    assert res.returncode == 0, res.stderr[-3000:]
    rows = read_jsonl(out / "metrics.jsonl")
    errors = sum(r["rewards/flaky/errors"] for r in rows)
    comps = read_jsonl(out / "completions.jsonl")
    unscored = sum(1 for c in comps if c["rewards"]["flaky"] is None)
    assert errors == unscored > 0
    assert all(c["total"] is None for c in comps if c["rewards"]["flaky"] is None)
    assert all(c["advantage"] == 0 for c in comps if c["total"] is None)
    assert "flaky" in res.stderr and "Traceback" in res.stderr  # logged once, with its traceback


def test_reward_failure_guard_stops_the_run(tmp_path):
    out = tmp_path / "run"
    res = run_cli("train", "--stage", "grpo", "--hw", "cpu", "-c", DEMO, f"train.output_dir={out}",
                  "train.max_steps=30",
                  "rewards=[{fn: 'tests/fixtures/flaky_reward.py:flaky'}]", "monitor.max_reward_failure_fraction=0.2")
    assert res.returncode != 0
    assert "max_failure_fraction" in res.stderr or "no score" in res.stderr
    assert "Traceback (most recent call last)" not in res.stderr.split("rlft:")[-1]


def test_completion_log_rows_are_completions_with_prompt_ids(tmp_path):
    """monitor.log_completions counts completions (not groups); rows carry the data row as prompt_id."""
    out = tmp_path / "run"
    res = run_cli("train", "--stage", "grpo", "--hw", "cpu", "-c", DEMO, f"train.output_dir={out}", "train.max_steps=2",
                  "monitor.log_completions=3")
    assert res.returncode == 0, res.stderr[-3000:]
    comps = read_jsonl(out / "completions.jsonl")
    assert [c["step"] for c in comps] == [1, 1, 1, 2, 2, 2]
    for c in comps:
        assert {"step", "prompt_id", "prompt", "completion", "rewards", "total", "advantage", "completion_tokens",
                "reward_version"} <= set(c)
        assert 1 <= c["completion_tokens"] <= 16 and c["reward_version"] == 1  # grpo.max_tokens 16 in the demo
        assert isinstance(c["prompt_id"], int) and set(c["rewards"]) == {"char_fraction"}
    assert comps[0]["prompt_id"] == comps[1]["prompt_id"] == comps[2]["prompt_id"]  # one group: one prompt


def test_summary_eval_start_and_end_and_resume_keeps_the_start(tmp_path):
    """eval.start / eval.end: fresh samples (group_size per evaluation prompt, fixed seed) through the rollout
    layer; a resumed run reports the start measured before its first checkpoint (kept in the checkpoint)."""
    import json

    out = tmp_path / "run"
    args = ("train", "--stage", "grpo", "--hw", "cpu", "-c", DEMO, f"train.output_dir={out}", "train.save_steps=1",
            "data.eval_prompts=3")
    res = run_cli(*args, "train.max_steps=2")
    assert res.returncode == 0, res.stderr[-3000:]
    ev = json.loads((out / "summary.json").read_text())["eval"]
    assert ev["start"]["n"] == ev["end"]["n"] == 3 * 8 and ev["start"]["prompts"] == 3
    assert 0 <= ev["start"]["reward_mean"] <= 1 and 0 <= ev["end"]["reward_mean"] <= 1
    assert "eval: mean reward" in res.stderr
    # the resumed run must take eval.start from the checkpoint, not measure it again
    state_file = out / "checkpoints" / "checkpoint-2" / "rlft_state.json"
    state = json.loads(state_file.read_text())
    assert state["trainer"]["eval_start"] == ev["start"]
    state["trainer"]["eval_start"] = {**ev["start"], "reward_mean": 0.123456}
    state_file.write_text(json.dumps(state))
    res = run_cli(*args, "train.max_steps=3", "--resume")
    assert res.returncode == 0, res.stderr[-3000:]
    ev2 = json.loads((out / "summary.json").read_text())["eval"]
    assert ev2["start"]["reward_mean"] == 0.123456 and ev2["end"]["n"] == 24
    res = run_cli("train", "--stage", "grpo", "--hw", "cpu", "-c", DEMO, f"train.output_dir={tmp_path / 'noeval'}",
                  "train.max_steps=1", "data.eval_prompts=0")
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads((tmp_path / "noeval" / "summary.json").read_text())["eval"] == {}


def test_truncation_rule_fires_once_and_overlong_penalty_reads_token_counts(tmp_path):
    """grpo.max_tokens=2: every completion is cut, so frac_truncated is 1, the `truncated` rule says so in one
    console line naming the key, and overlong_penalty (from the sampler's token counts) gives each -1."""
    out = tmp_path / "run"
    cfg = tmp_path / "overlong.yaml"
    cfg.write_text("rewards:\n  - fn: char_fraction\n  - fn: overlong_penalty\n    weight: 0.0\n"
                   "    kwargs: {buffer: 1}\n")
    res = run_cli("train", "--stage", "grpo", "--hw", "cpu", "-c", DEMO, "-c", cfg, f"train.output_dir={out}",
                  "train.max_steps=3", "grpo.max_tokens=2", "monitor.truncated_warn=0.5")  # the demo turns it off
    assert res.returncode == 0, res.stderr[-3000:]
    said = [line for line in (res.stdout + res.stderr).splitlines() if "frac_truncated" in line]
    assert len(said) == 1 and "grpo.max_tokens" in said[0] and "overlong_penalty" in said[0], said
    rows = read_jsonl(out / "metrics.jsonl")
    assert [r["frac_truncated"] for r in rows] == [1.0, 1.0, 1.0]
    assert all(r["rewards/overlong_penalty/mean"] == -1.0 for r in rows), rows
    fired = [h for h in read_jsonl(out / "health.jsonl") if h["rule"] == "truncated"]
    assert [h["step"] for h in fired] == [1, 2, 3] and fired[0]["threshold"] == 0.5
