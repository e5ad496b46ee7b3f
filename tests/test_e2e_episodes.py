"""End-to-end multi-turn PPO through the CLI on the tiny model and toolsim's tiny variant (CPU)."""

import json
import statistics
import time

import pytest

from conftest import read_jsonl, run_cli

pytestmark = pytest.mark.e2e
PPO = "configs/examples/tool_use_ppo.yaml"
EPISODE_KEYS = ["episode_return", "episode_return_std", "success_rate", "episode_length", "tool_calls",
                "episodes_truncated", "episodes_failed", "rewards/step_penalty/mean", "reward", "policy_loss",
                "value_loss", "entropy", "explained_variance"]


def test_tool_use_ppo_learns(tmp_path):
    out = tmp_path / "run"
    t0 = time.monotonic()
    res = run_cli("train", "--stage", "ppo", "--hw", "cpu", "-c", PPO, f"train.output_dir={out}")
    took = time.monotonic() - t0
    assert res.returncode == 0, res.stderr[-3000:]
    rows = [r for r in read_jsonl(out / "metrics.jsonl") if "episode_return" in r]
    assert [r["step"] for r in rows] == list(range(1, 41))
    for row in rows:
        missing = [k for k in EPISODE_KEYS if row.get(k) is None]
        assert not missing, missing
    first = {k: statistics.fmean(r[k] for r in rows[:10]) for k in ("episode_return", "success_rate", "episode_length")}
    last = {k: statistics.fmean(r[k] for r in rows[-10:]) for k in ("episode_return", "success_rate", "episode_length")}
    print(f"first10 {first} last10 {last} took {took:.0f}s")
    assert last["success_rate"] > first["success_rate"] + 0.5, (first, last)
    assert last["episode_return"] > first["episode_return"] + 15, (first, last)
    assert last["episode_length"] < first["episode_length"] - 0.5, (first, last)
    summary = json.loads((out / "summary.json").read_text())
    start, end = summary["eval"]["start"], summary["eval"]["end"]
    assert end["success_rate"] > start["success_rate"] + 0.5 and end["reward_mean"] > start["reward_mean"], summary
    # completions.jsonl: whole episodes, every turn with its action, observation, reward and components
    eps = read_jsonl(out / "completions.jsonl")
    assert len(eps) == 40 * 4
    ep = eps[0]
    assert ep["prompt"][0]["content"].startswith("Call ") and 1 <= ep["length"] <= 3
    for turn in ep["turns"]:
        assert set(turn) >= {"action", "observation", "reward", "components"}
        assert turn["reward"] == pytest.approx(sum(turn["components"].values()))
    assert ep["return"] == pytest.approx(sum(t["reward"] for t in ep["turns"]))


FLAKY_ENV = '''
import time


class FlakyEnv:
    """Three steps per episode; task ids 0, 3, 6, ... raise on step 2, ids 1 and 10 sleep past the timeout."""

    def __init__(self, always_raise=False):
        self.always_raise = always_raise

    def reset(self, row, seed):
        self.task, self.n = row["task_id"], 0
        return [{"role": "user", "content": "Call f."}]

    def step(self, action):
        self.n += 1
        if self.always_raise:
            raise RuntimeError("broken env")
        if self.n == 2 and self.task % 3 == 0:
            raise RuntimeError("boom on step 2")
        if self.n == 2 and self.task in (1, 10):
            time.sleep(1.0)
        return "ok", {"progress": 1.0}, self.n == 3, {"success": self.n == 3}
'''


def flaky_config(tmp_path, **env_kwargs):
    (tmp_path / "envs").mkdir(exist_ok=True)
    (tmp_path / "envs" / "flaky.py").write_text(FLAKY_ENV)
    kwargs = "".join(f"\n    {k}: {str(v).lower()}" for k, v in env_kwargs.items()) or " {}"
    cfg = tmp_path / "flaky.yaml"
    cfg.write_text(f"""model: {{name_or_path: tiny}}
env:
  name: envs/flaky.py:FlakyEnv
  kwargs:{kwargs}
  max_episode_length: 3
  step_timeout_s: 0.3
  failure_reward: -7.0
  num_tasks: 18
data: {{eval_prompts: 0}}
ppo: {{batch_size: 18, mini_batch_size: 6, ppo_epochs: 1, num_episodes: 36, max_tokens: 2, init_kl_coef: 0.0,
      log_interval: 18, save_interval: 36, eval_interval: 36}}
monitor: {{on_critical: warn, on_warning: warn}}
hw: {{cpu_threads: 1}}
""")
    return cfg


def test_env_faults_are_counted_and_the_run_goes_on(tmp_path):
    out = tmp_path / "run"
    res = run_cli("train", "--stage", "ppo", "--hw", "cpu", "-c", flaky_config(tmp_path), f"train.output_dir={out}")
    # (the env file is found next to the config: the working directory is the repository)
    assert res.returncode == 0, res.stderr[-3000:]
    rows = [r for r in read_jsonl(out / "metrics.jsonl") if "episode_return" in r]
    assert len(rows) == 2
    for row in rows:  # 6 raise + 2 time out of 18 per update
        assert row["episodes_failed"] == 8 and row["rewards/env_failure/mean"] == pytest.approx(-7.0 * 8 / 18)
        assert row["success_rate"] == pytest.approx(10 / 18)
    eps = read_jsonl(out / "completions.jsonl")
    faults = [t["fault"] for e in eps for t in e["turns"] if t.get("fault")]
    assert any(f.startswith("raised: RuntimeError: boom on step 2") for f in faults)


def test_an_env_failing_most_episodes_stops_the_run_with_exit_4(tmp_path):
    out = tmp_path / "run"
    res = run_cli("train", "--stage", "ppo", "--hw", "cpu", "-c", flaky_config(tmp_path, always_raise=True),
                  f"train.output_dir={out}")
    assert res.returncode == 4, res.stderr[-3000:]
    assert "flaky.py:FlakyEnv' faulted in 36 of 36 episodes" in res.stderr
    assert "Traceback" not in res.stderr


def test_tool_use_grpo_learns(tmp_path):
    out = tmp_path / "run"
    res = run_cli("train", "--stage", "grpo", "--hw", "cpu", "-c", "configs/examples/tool_use_grpo.yaml",
                  f"train.output_dir={out}")
    assert res.returncode == 0, res.stderr[-3000:]
    rows = [r for r in read_jsonl(out / "metrics.jsonl") if "episode_return" in r]
    assert [r["step"] for r in rows] == list(range(1, 41))
    assert all(r.get("value_loss") is None for r in rows)  # no critic
    first = {k: statistics.fmean(r[k] for r in rows[:10]) for k in ("episode_return", "success_rate", "episode_length")}
    last = {k: statistics.fmean(r[k] for r in rows[-10:]) for k in ("episode_return", "success_rate", "episode_length")}
    print(f"grpo first10 {first} last10 {last}")
    assert last["success_rate"] > first["success_rate"] + 0.4, (first, last)
    assert last["episode_return"] > first["episode_return"] + 15, (first, last)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["eval"]["end"]["success_rate"] > summary["eval"]["start"]["success_rate"] + 0.5, summary["eval"]
    eps = read_jsonl(out / "completions.jsonl")
    assert len(eps) == 40 * 4 and all("advantage" in e and e["turns"] for e in eps)


def test_bad_env_kwargs_exit_2_before_the_run_folder(tmp_path):
    out = tmp_path / "run"
    res = run_cli("train", "--stage", "ppo", "--hw", "cpu", "-c", PPO, f"train.output_dir={out}",
                  "env.kwargs.variant=huge")
    assert res.returncode == 2, res.stderr[-2000:]
    assert "env.kwargs" in res.stderr and "'tiny' or 'chat'" in res.stderr and "Traceback" not in res.stderr
    assert not out.exists()


COIN_ENV = '''
class CoinEnv:
    """One action per episode. Even task ids pay 0 whatever the action (every group constant); odd ones pay 1
    when the action's text has an odd length, so most of their groups carry signal."""

    def reset(self, row, seed):
        self.task = row["task_id"]
        return [{"role": "user", "content": "Flip."}]

    def step(self, action):
        paid = 0.0 if self.task % 2 == 0 else float(len(action) % 2)
        return "ok", {"coin": paid}, True, {"success": paid > 0}
'''


def coin_config(tmp_path, max_tries: int):
    (tmp_path / "envs").mkdir(exist_ok=True)
    (tmp_path / "envs" / "coin.py").write_text(COIN_ENV)
    cfg = tmp_path / "coin.yaml"
    cfg.write_text(f"""model: {{name_or_path: tiny}}
env: {{name: envs/coin.py:CoinEnv, max_episode_length: 1, num_tasks: 16}}
data: {{eval_prompts: 0}}
train: {{max_steps: 3, logging_steps: 1, save_steps: 3, max_seq_length: 64}}
grpo: {{group_size: 4, batch_size: 4, num_substeps: 1, ppo_epochs: 1, max_tokens: 3, dynamic_sampling: true,
       dynamic_sampling_max_tries: {max_tries}}}
monitor: {{truncated_warn: 1.0, log_completions: -1}}
hw: {{cpu_threads: 1}}
""")
    return cfg


def test_dynamic_sampling_refills_constant_groups(tmp_path):
    """Half the tasks give constant groups: dynamic sampling samples again until each update holds
    grpo.batch_size groups with signal, and every update trains a full batch."""
    out = tmp_path / "run"
    res = run_cli("train", "--stage", "grpo", "--hw", "cpu", "-c", coin_config(tmp_path, 6), f"train.output_dir={out}")
    assert res.returncode == 0, res.stderr[-3000:]
    rows = [r for r in read_jsonl(out / "metrics.jsonl") if "episode_return" in r]
    assert [r["step"] for r in rows] == [1, 2, 3]
    print([(r["dynamic/tries"], r["dynamic/kept_groups"]) for r in rows])
    assert any(r["dynamic/tries"] > 1 for r in rows), rows  # refills happened
    assert all(r["dynamic/kept_groups"] == 4 for r in rows), rows  # and found the step's 4 groups with signal
    assert [r["episodes"] for r in rows] == [16, 32, 48]  # every update trained a full batch of 4 x 4 episodes
    eps = read_jsonl(out / "completions.jsonl")
    steps = {}
    for e in eps:
        steps.setdefault(e["step"], []).append(e)
    assert all(len(v) == 16 for v in steps.values()) and len(steps) == 3
    # the trained groups carry signal: within each group of 4 consecutive episodes the returns differ
    for v in steps.values():
        for k in range(0, 16, 4):
            assert len({e["return"] for e in v[k:k + 4]}) > 1, v[k:k + 4]


def test_dynamic_sampling_out_of_tries_trains_on_what_it_has(tmp_path):
    """One try allowed: a step short of groups with signal trains a full batch anyway, constant groups filling
    the rest, and says so once."""
    out = tmp_path / "run"
    res = run_cli("train", "--stage", "grpo", "--hw", "cpu", "-c", coin_config(tmp_path, 1), f"train.output_dir={out}")
    assert res.returncode == 0, res.stderr[-3000:]
    rows = [r for r in read_jsonl(out / "metrics.jsonl") if "episode_return" in r]
    assert all(r["dynamic/tries"] == 1 for r in rows) and [r["episodes"] for r in rows] == [16, 32, 48]
    assert any(r["dynamic/kept_groups"] < 4 for r in rows), rows
    said = [line for line in (res.stdout + res.stderr).splitlines() if "dynamic sampling:" in line]
    assert len(said) == 1 and "grpo.dynamic_sampling_max_tries" in said[0], said
