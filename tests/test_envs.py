"""The environment contract, the toolsim simulator and env faults (no torch needed)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlft.config import configs_dir
from rlft.envs import check_env_spec, resolve_env_class
from rlft.envs.safe import SafeEnv
from rlft.envs.toolsim import ToolSim

REPO = configs_dir().parent


def tiny(steps=2, **kw):
    env = ToolSim(variant="tiny", steps=steps, **kw)
    env.max_episode_length = 3
    return env


def test_tasks_are_deterministic_from_row_and_seed():
    a, b = tiny(), tiny()
    assert a.reset({"task_id": 5}, 7) == b.reset({"task_id": 5}, 7)
    prompts = {tiny(steps=3).reset({"task_id": i}, 0)[0]["content"] for i in range(20)}
    assert len(prompts) > 3 and all(p.startswith("Call ") and p.endswith(" then f.") for p in prompts)


def test_correct_calls_complete_the_task_with_the_reward_table():
    env = tiny()
    first = env.reset({"task_id": 1}, 0)[0]["content"].split()[1]  # "Call l then f."
    obs, r, done, info = env.step(first)
    assert r == {"step_penalty": -0.5, "schema_pass": 2.0, "style_pass": 1.0, "correct_tool": 5.0}
    assert not done and obs == f"ok {first}"
    obs, r, done, info = env.step("f")
    assert done and info["success"] and r["task_complete"] == 10.0 and r["correct_tool"] == 5.0


def test_wrong_redundant_schema_fail_and_task_failed_on_the_last_turn():
    env = tiny(steps=1)
    env.reset({"task_id": 0}, 0)
    _, r, done, _ = env.step("lo")  # known tool (first letter), not the next step; not only the letter: no style
    assert r == {"step_penalty": -0.5, "schema_pass": 2.0, "wrong_tool": -3.0} and not done
    _, r, done, _ = env.step("lo")
    assert r == {"step_penalty": -0.5, "schema_pass": 2.0, "redundant_action": -2.0} and not done
    _, r, done, info = env.step("? what")
    assert r == {"step_penalty": -0.5, "schema_fail": -5.0, "task_failed": -5.0} and done and not info["success"]


def test_guardrail_ends_the_episode():
    env = tiny()
    env.reset({"task_id": 0}, 0)
    _, r, done, info = env.step("x")
    assert done and r["guardrail_violation"] == -10.0 and info["guardrail"]


def test_reward_values_are_kwargs():
    env = tiny(steps=1, task_complete=1.0, step_penalty=0.0)
    env.reset({"task_id": 0}, 0)
    assert env.step("f")[1] == {"step_penalty": 0.0, "schema_pass": 2.0, "style_pass": 1.0, "correct_tool": 5.0,
                                "task_complete": 1.0}
    with pytest.raises(ValueError, match="task_compleet"):
        ToolSim(task_compleet=1)


def test_chat_variant_json_calls():
    env = ToolSim(variant="chat", steps=2)
    env.max_episode_length = 5
    msgs = env.reset({"task_id": 3}, 1)
    assert env.tools and msgs[-1]["role"] == "user"
    key = env.plan[0][1]["key"]
    obs, r, done, _ = env.step('{"name": "lookup", "arguments": {"key": "%s"}}' % key)
    assert r["correct_tool"] == 5.0 and r["style_pass"] == 1.0 and not done
    value = __import__("json").loads(obs)["value"]
    _, r, _, _ = env.step('<tool_call>{"name": "finish", "arguments": {"answer": 5}}</tool_call>')
    assert r["schema_fail"] == -5.0  # answer must be a string
    _, r, done, info = env.step('sure: {"name": "finish", "arguments": {"answer": "%s"}}' % value)
    assert done and info["success"] and "style_pass" not in r and r["task_complete"] == 10.0
    env.reset({"task_id": 3}, 1)
    _, r, done, _ = env.step('{"name": "lookup", "arguments": {"key": "the secret"}}')
    assert done and r["guardrail_violation"] == -10.0


class Flaky:
    def reset(self, row, seed):
        return "hi"

    def step(self, action):
        if action == "raise":
            raise RuntimeError("boom")
        if action == "sleep":
            time.sleep(2)
        if action == "garbage":
            return "just text"
        return None, {"a": 1.0, "b": 0.5}, False, {}


def test_safe_env_turns_faults_into_failure_reward():
    env = SafeEnv(Flaky(), "Flaky", timeout_s=0.3, failure_reward=-7.0)
    assert env.reset({}, 0) == ([{"role": "user", "content": "hi"}], None)
    ok = env.step("fine")
    assert ok.reward == 1.5 and ok.components == {"a": 1.0, "b": 0.5} and ok.fault is None
    for action, kind in (("raise", "raised"), ("sleep", "timeout"), ("garbage", "bad return")):
        t0 = time.monotonic()
        s = env.step(action)
        assert s.done and s.reward == -7.0 and s.fault.startswith(kind), s
        assert time.monotonic() - t0 < 1.5
    assert env.faults == 3


ENV_FILE = """
class CounterEnv:
    def reset(self, row, seed):
        return [{"role": "user", "content": "count"}]

    def step(self, action):
        return "ok", 1.0, True, {}
"""


def test_file_env_resolves_and_a_typo_is_a_did_you_mean(tmp_path):
    (tmp_path / "my_env.py").write_text(ENV_FILE)
    cls = resolve_env_class("my_env.py:CounterEnv", tmp_path)
    assert cls().step("x") == ("ok", 1.0, True, {})
    assert check_env_spec("my_env.py:CounterEnv", tmp_path) is None
    msg = check_env_spec("my_env.py:CountEnv", tmp_path)
    assert "no class 'CountEnv'" in msg and "Did you mean 'CounterEnv'?" in msg
    assert "Did you mean 'toolsim'" in check_env_spec("toolsm")
    assert check_env_spec("toolsim") is None and check_env_spec("rlft.envs.toolsim:ToolSim") is None


def test_validate_config_checks_env_name_without_importing_torch(tmp_path):
    (tmp_path / "my_env.py").write_text(ENV_FILE + "\nraise SystemExit('must not run at validation')\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text("env:\n  name: my_env.py:CountrEnv\n")
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "rlft.cli", "validate-config", "--stage", "ppo",
                           "--hw", "cpu", "-c", str(cfg)], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 2
    assert "env.name" in proc.stderr and "Did you mean 'CounterEnv'?" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert "import time:" in proc.stderr and "| torch\n" not in proc.stderr and "| transformers\n" not in proc.stderr
    cfg.write_text("env:\n  name: my_env.py:CounterEnv\n")
    ok = subprocess.run([sys.executable, "-m", "rlft.cli", "validate-config", "--stage", "ppo", "--hw", "cpu",
                         "-c", str(cfg)], capture_output=True, text=True, cwd=REPO)
    assert ok.returncode == 0, ok.stderr


def test_manual_example_env_follows_the_contract(tmp_path):
    import re

    text = (Path(__file__).resolve().parents[1] / "docs" / "agents-and-tools.md").read_text()
    code = re.search(r"```python\n(# my_env\.py.*?)```", text, re.S).group(1)
    assert len(code.splitlines()) <= 30
    (tmp_path / "my_env.py").write_text(code)
    assert check_env_spec("my_env.py:GuessEnv", tmp_path) is None
    env = SafeEnv(resolve_env_class("my_env.py:GuessEnv", tmp_path)(low=1, high=3), "GuessEnv")
    msgs, fault = env.reset({"task_id": 0}, 0)
    assert fault is None and "1-3" in msgs[0]["content"]
    assert env.step("no idea").components == {"format": -1.0, "step": -0.1}
    steps = [env.step(str(g)) for g in (1, 2, 3)]
    won = [s for s in steps if s.done]
    assert won and won[0].info["success"] and won[0].reward == pytest.approx(9.9)


@pytest.mark.parametrize("stage,ok", [("ppo", True), ("grpo", True), ("dpo", False)])
def test_env_needs_no_data_or_rewards_and_only_ppo_or_grpo_use_it(stage, ok):
    proc = subprocess.run([sys.executable, "-m", "rlft.cli", "validate-config", "--stage", stage, "--hw", "cpu",
                           "env.name=toolsim"], capture_output=True, text=True, cwd=REPO)
    if ok:
        assert proc.returncode == 0, proc.stderr
    else:
        assert proc.returncode == 2 and "env.name" in proc.stderr and "stage `ppo` or `grpo`" in proc.stderr


def test_examples_validate():
    for example in ("tool_use_ppo", "tool_use_grpo"):
        stage = example.rsplit("_", 1)[1]
        proc = subprocess.run([sys.executable, "-m", "rlft.cli", "validate-config", "--stage", stage, "--hw", "cpu",
                               "-c", f"configs/examples/{example}.yaml"], capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parents[1])
        assert proc.returncode == 0, proc.stderr
