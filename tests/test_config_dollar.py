"""`$` in config values: interpolation applies everywhere except rewards[].kwargs, which reach the
reward function verbatim; a failed interpolation says how to write the text literally."""
from pathlib import Path

import pytest

from conftest import run_cli
from rlft.config import ConfigError, compose, validate
from rlft.rewards import build_reward_suite

KWARGS_YAML = r"""lora:
  r: 8
  lora_alpha: ${lora.r}
data:
  train: demo
rewards:
  - fn: char_fraction
    kwargs:
      template: "Answer: ${answer}"
      escaped: '\${x}'
      regex: '\d+\$ and \\ end'
      nested: {list: ['${a.b}', 'C:\path']}
"""


def test_reward_kwargs_reach_the_function_verbatim_while_other_keys_interpolate(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("k.yaml").write_text(KWARGS_YAML)
    cfg, _ = validate(compose("grpo", "cpu", ["k.yaml"]))
    assert cfg.lora.lora_alpha == 8  # interpolation still works elsewhere in the same config
    seen = {}

    def capture(prompts, completions, **kw):
        seen.update(kw)
        return [0.0] * len(completions)

    suite = build_reward_suite([vars(r) for r in cfg.rewards])
    suite.rewards[0].fn = capture
    suite.score(["p"], ["c"])
    assert seen["template"] == "Answer: ${answer}"
    assert seen["escaped"] == "\\${x}"
    assert seen["regex"] == "\\d+\\$ and \\\\ end"
    assert seen["nested"] == {"list": ["${a.b}", "C:\\path"]}


def test_a_value_without_interpolation_is_verbatim_even_when_others_interpolate(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("s.yaml").write_text("lora:\n  lora_alpha: ${lora.r}\ndata:\n  system_prompt: 'Cost: $5 \\d {x} \\\\'\n")
    cfg, _ = validate(compose("grpo", "cpu", ["s.yaml"]))
    assert cfg.data.system_prompt == "Cost: $5 \\d {x} \\\\"


def test_failed_interpolation_in_a_user_value_shows_the_escape(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("p.yaml").write_text("data:\n  train: demo\n  system_prompt: 'Hello ${name}'\n")
    with pytest.raises(ConfigError) as exc:
        compose("grpo", "cpu", ["p.yaml"])
    (problem,) = exc.value.problems
    assert (problem.key, problem.layer) == ("data.system_prompt", "p.yaml:3")
    assert "interpolation failed" in problem.message and "`\\${name}`" in problem.message
    Path("p.yaml").write_text("data:\n  train: demo\n  system_prompt: 'Hello \\${name}'\n")
    cfg, _ = validate(compose("grpo", "cpu", ["p.yaml"]))
    assert cfg.data.system_prompt == "Hello ${name}"


def test_cli_prints_the_escape_for_a_failed_interpolation(tmp_path):
    cfg = tmp_path / "p.yaml"
    cfg.write_text("data:\n  train: demo\n  system_prompt: 'Hello ${name}'\nrewards:\n  - fn: char_fraction\n"
                   "    kwargs: {template: 'Answer: ${answer}'}\n")
    res = run_cli("validate-config", "--stage", "grpo", "-c", cfg)
    assert res.returncode == 2
    assert "data.system_prompt" in res.stderr and "\\${name}" in res.stderr and "Traceback" not in res.stderr
    assert "config invalid: 1 error" in res.stderr  # the reward's template is not an error
