"""PPO with a `ppo.rollback_kl` that undoes the step of every update trains nothing: the run says so, on the console
once and in health.jsonl at each such update, as `all_masked_truncated` does (it reported "finished" silently)."""

import pytest

from conftest import read_jsonl, run_cli

pytestmark = pytest.mark.e2e


def test_every_step_undone_by_rollback_kl_is_reported(tmp_path):
    out = tmp_path / "run"
    res = run_cli("train", "--stage", "ppo", "--hw", "cpu", "-c", "configs/examples/ppo_demo.yaml",
                  f"train.output_dir={out}", "ppo.rollback_kl=1e-9", "ppo.num_episodes=48", "ppo.eval_interval=48",
                  "ppo.save_interval=48", "ppo.log_interval=16", "data.eval_prompts=0", "ppo.max_tokens=8")
    assert res.returncode == 0, res.stderr[-3000:]
    rows = [r for r in read_jsonl(out / "metrics.jsonl") if "rollback" in r]
    assert [r["step"] for r in rows] == [1, 2, 3] and all(r["frac_steps_undone"] == 1.0 for r in rows), rows
    said = [line for line in (res.stdout + res.stderr).splitlines() if "frac_steps_undone=" in line]
    assert len(said) == 1 and "nothing trained" in said[0] and "ppo.rollback_kl" in said[0], said
    fired = [h for h in read_jsonl(out / "health.jsonl") if h["rule"] == "all_steps_undone"]
    assert [h["step"] for h in fired] == [1, 2, 3] and all(h["action"] == "warn" for h in fired), fired
