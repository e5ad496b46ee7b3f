"""Rewards changed mid-run: reloaded reward files and overrides.yaml weights (unit), and a GRPO run whose
reward file changes under it (e2e)."""

from __future__ import annotations

import json

import pytest

from conftest import ROOT, read_jsonl, run_cli
from rlft.rewards import build_reward_suite
from rlft.rewards.reload import RewardReloader

V1 = "def score(prompts, completions, **kw):\n    return [0.25] * len(completions)\n"


def _suite(tmp_path, text=V1):
    f = tmp_path / "my_reward.py"
    f.write_text(text)
    return f, build_reward_suite([{"fn": f"{f}:score"}, {"fn": "char_fraction", "weight": 0.5}])


def test_changed_file_is_reloaded_and_versioned(tmp_path):
    f, suite = _suite(tmp_path)
    rel = RewardReloader(suite, tmp_path / "overrides.yaml")
    assert rel.check() == [] and rel.version == 1
    rel.remember(["p"], ["c"], {})
    f.write_text(V1.replace("0.25", "0.75"))
    msgs = rel.check()
    assert rel.version == 2 and any("reloaded my_reward.py" in m for m in msgs)
    assert suite.rewards[0](["p"], ["a", "b"]) == [0.75, 0.75]
    assert rel.check() == [] and rel.version == 2  # nothing new


@pytest.mark.parametrize("edit, why", [
    ("def score(prompts, completions:\n", "does not import"),
    ("import sys\nsys.exit(3)\n", "does not import"),
    ("def other(p, c, **kw):\n    return []\n", "does not import"),
    ("def score(prompts, completions, **kw):\n    raise RuntimeError('boom')\n", "fails on a probe completion"),
    ("def score(prompts, completions, **kw):\n    return [float('nan')] * len(completions)\n", "fails on a probe"),
])
def test_broken_edit_keeps_the_old_version(tmp_path, edit, why):
    f, suite = _suite(tmp_path)
    rel = RewardReloader(suite)
    f.write_text(edit)
    msgs = rel.check()
    assert rel.version == 1 and len(msgs) == 1 and why in msgs[0] and "keeping the previous version" in msgs[0]
    assert suite.rewards[0](["p"], ["a"]) == [0.25]
    assert rel.check() == []  # reported once, not at every step


def test_overrides_change_weights(tmp_path):
    _, suite = _suite(tmp_path)
    over = tmp_path / "overrides.yaml"
    rel = RewardReloader(suite, over)
    over.write_text("weights: {char_fraction: 2.0}\n")
    assert "weight 0.5 -> 2" in rel.check()[0] and rel.version == 2 and suite.rewards[1].weight == 2.0
    over.write_text("weights: {nope: 1.0}\n")
    msgs = rel.check()
    assert rel.version == 2 and "unknown reward name(s) nope" in msgs[0] and suite.rewards[1].weight == 2.0
    over.write_text("weights: [1, 2\n")
    assert "not readable YAML" in rel.check()[0]
    over.write_text("weights: {char_fraction: .inf}\n")
    assert "finite numbers" in rel.check()[0] and rel.version == 2


def _evolving_run(tmp_path, edit: str, weights: str = ""):
    reward = tmp_path / "evolving.py"
    source = (ROOT / "tests" / "fixtures" / "evolving_reward.py").read_text()
    source = source.replace('EDIT = "def evolving', f'EDIT = {edit!r}\nOLD_EDIT = "def evolving')
    reward.write_text(source.replace('WEIGHTS = ""', f"WEIGHTS = {weights!r}"))
    out = tmp_path / "run"
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"rewards:\n  - fn: {reward}:evolving\n    kwargs: {{overrides: {out / 'overrides.yaml'}}}\n"
                   "  - fn: char_fraction\nmonitor:\n  reward_hot_reload: true\n")
    res = run_cli("train", "--stage", "grpo", "--hw", "cpu", "-c", "configs/examples/grpo_demo.yaml", "-c", cfg,
                  f"train.output_dir={out}", "train.max_steps=4", "train.save_steps=10", "monitor.log_completions=-1",
                  "data.eval_prompts=0")  # no start/end evaluation: the reward's second call is step 2
    return out, res


@pytest.mark.e2e
def test_run_picks_up_a_changed_reward_and_weights(tmp_path):
    v2 = "def evolving(prompts, completions, **kwargs):\n    return [1.0] * len(completions)\n"
    out, res = _evolving_run(tmp_path, v2, "weights: {char_fraction: 0.0}\n")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "hot reload: reward 'evolving': reloaded evolving.py" in res.stderr
    assert "weight 1 -> 0" in res.stderr
    rows = read_jsonl(out / "metrics.jsonl")
    assert [r["reward_version"] for r in rows] == [1, 1, 2, 2]
    assert [r["rewards/evolving/mean"] for r in rows] == [0.0, 0.0, 1.0, 1.0]
    assert [r["reward"] for r in rows[2:]] == [1.0, 1.0]  # char_fraction weighted 0 from step 3
    comps = read_jsonl(out / "completions.jsonl")
    assert {(c["step"], c["reward_version"], c["rewards"]["evolving"]) for c in comps} == {
        (1, 1, 0.0), (2, 1, 0.0), (3, 2, 1.0), (4, 2, 1.0)}
    assert all(c["total"] == 1.0 for c in comps if c["step"] >= 3)


@pytest.mark.e2e
def test_broken_reward_edit_keeps_version_1_and_the_run_finishes(tmp_path):
    out, res = _evolving_run(tmp_path, "def evolving(:\n")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "keeping the previous version" in res.stderr and "Traceback" not in res.stderr
    rows = read_jsonl(out / "metrics.jsonl")
    assert [r["reward_version"] for r in rows] == [1, 1, 1, 1]
    assert all(r["rewards/evolving/mean"] == 0.0 for r in rows)
    assert json.loads((out / "summary.json").read_text())["status"] == "finished"


@pytest.mark.e2e
def test_ppo_picks_up_a_changed_reward(tmp_path):
    reward = tmp_path / "evolving.py"
    source = (ROOT / "tests" / "fixtures" / "evolving_reward.py").read_text()
    v2 = "def evolving(prompts, completions, **kwargs):\n    return [1.0] * len(completions)\n"
    source = source.replace('EDIT = "def evolving', f'EDIT = {v2!r}\nOLD_EDIT = "def evolving')
    reward.write_text(source.replace('WEIGHTS = ""', "WEIGHTS = ''"))
    out = tmp_path / "run"
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"rewards:\n  - fn: {reward}:evolving\n    kwargs: {{overrides: {out / 'overrides.yaml'}}}\n"
                   "  - fn: char_fraction\nmonitor:\n  reward_hot_reload: true\n")
    res = run_cli("train", "--stage", "ppo", "--hw", "cpu", "-c", "configs/examples/ppo_demo.yaml", "-c", cfg,
                  f"train.output_dir={out}", "ppo.num_episodes=64", "data.eval_prompts=0", "monitor.log_completions=-1")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "hot reload: reward 'evolving': reloaded evolving.py" in res.stderr
    rows = [r for r in read_jsonl(out / "metrics.jsonl") if "reward" in r]
    assert [r["reward_version"] for r in rows] == [1, 1, 2, 2]
    assert [r["rewards/evolving/mean"] for r in rows] == [0.0, 0.0, 1.0, 1.0]
    comps = read_jsonl(out / "completions.jsonl")
    assert {(c["step"], c["reward_version"]) for c in comps} == {(1, 1), (2, 1), (3, 2), (4, 2)}


def test_hot_reload_on_a_stage_that_does_not_reload_is_a_warning():
    from test_cli_validate import cli

    res = cli("validate-config", "--stage", "dpo", "--hw", "cpu", "monitor.reward_hot_reload=true")
    assert "monitor.reward_hot_reload" in res.stderr and "does not reload" in res.stderr
