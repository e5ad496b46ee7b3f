"""The staged tool-agent demo (configs/examples/pipeline_tool_use_demo.yaml): ORPO -> RS-SFT -> PPO on the tiny
model and toolsim, run through the CLI with short stages. Its learning is measured by
scripts/bench_staged_tool_use.py, not here."""

import json

import pytest
import yaml

from conftest import ROOT, read_jsonl, run_cli

EXAMPLES = ROOT / "configs" / "examples"
DEMO = EXAMPLES / "pipeline_tool_use_demo.yaml"


def test_demo_data_matches_the_env():
    """The committed pairs are what the env opens each task with: chosen is the plan's first call."""
    from rlft.envs.toolsim import ToolSim

    env = ToolSim(variant="tiny", steps=1)
    prefs = read_jsonl(EXAMPLES / "data" / "tool_use_demo_prefs.jsonl")
    assert len(prefs) == 32 and {r["task_id"] for r in prefs} == set(range(32))
    for row in prefs:
        assert env.reset({"task_id": row["task_id"]}, row["env_seed"]) == [{"role": "user", "content": row["prompt"]}]
        assert row["chosen"] == env.plan[0][0] and row["rejected"] != row["chosen"]
    assert {r["rejected"] for r in prefs} >= {"l", "c", "w", "x", "F"}  # other tools, the forbidden one, a non-call


@pytest.mark.e2e
def test_staged_tool_use_demo_runs(tmp_path):
    res = run_cli("pipeline", "run", DEMO, "data.eval_prompts=8", "stages.orpo.train.max_steps=6",
                  "stages.rs_sft.rs_sft.rounds=1", "stages.rs_sft.rs_sft.reward_threshold=-100",
                  "stages.ppo.ppo.num_episodes=48", "stages.ppo.ppo.eval_interval=48",
                  "stages.ppo.ppo.save_interval=48", cwd=tmp_path, env={"HF_HUB_OFFLINE": "1"})
    assert res.returncode == 0, res.stderr[-3000:]
    root = tmp_path / "runs" / "pipeline_tool_use_demo"
    summary = json.loads((root / "pipeline_summary.json").read_text())
    assert [s["stage"] for s in summary["stages"]] == ["orpo", "rs_sft", "ppo"]
    assert [s["status"] for s in summary["stages"]] == ["finished"] * 3
    runs = [tmp_path / s["dir"] for s in summary["stages"]]
    for run in runs:
        assert json.loads((run / "summary.json").read_text())["status"] == "finished"
    # each stage starts from the one before
    assert not yaml.safe_load((runs[0] / "config.yaml").read_text())["model"].get("init_from")
    for earlier, later in zip(runs, runs[1:]):
        init_from = yaml.safe_load((later / "config.yaml").read_text())["model"]["init_from"]
        assert (tmp_path / init_from).resolve() == earlier.resolve(), (init_from, earlier)
    # the single-turn stages are measured with toolsim's first-action reward, the PPO stage on whole episodes
    for stage in summary["stages"][:2]:
        for when in ("start", "end"):
            assert set(stage["eval"][when]["per_reward"]) == {"first_action_return", "first_action_success"}
    ppo = json.loads((runs[2] / "summary.json").read_text())
    for when in ("start", "end"):
        ev = ppo["eval"][when]
        assert 0.0 <= ev["success_rate"] <= 1.0 and isinstance(ev["reward_mean"], float) and ev["n"] == 8, ev
    rows = [r for r in read_jsonl(runs[2] / "metrics.jsonl") if "success_rate" in r]
    assert [r["step"] for r in rows] == [1, 2, 3]
