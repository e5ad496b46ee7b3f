"""Hostile and degenerate input through `rlft validate-config`: each is one `error: KEY (LAYER): MESSAGE`
line and exit 2, never a traceback, never a config that validates and then trains nothing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlft.cli import app

LINE = re.compile(r"^error: (\S+) \((.+?)\): (.+)$")
ENV = {"CUDA_VISIBLE_DEVICES": ""}
ROWS = [{"prompt": f"q{i}", "answer": str(i)} for i in range(16)]
GRPO = ["validate-config", "--stage", "grpo", "data.train=d.jsonl", "rewards=[exact_match]"]


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))


def run(*args: str):
    result = CliRunner().invoke(app, list(args), env=ENV)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    return result


def one_error(*args: str) -> tuple[str, str, str]:
    result = run(*args)
    assert result.exit_code == 2, result.output
    errors = [m.group(1, 2, 3) for m in map(LINE.match, result.stderr.splitlines()) if m]
    assert len(errors) == 1, result.stderr
    return errors[0]


def ok(*args: str) -> None:
    result = run(*args)
    assert result.exit_code == 0, result.output


# --- rewards left empty ------------------------------------------------------------------------------

def test_rewards_left_empty_is_no_reward_functions():
    Path("r.yaml").write_text("data:\n  train: d.jsonl\nrewards:\n")
    key, layer, msg = one_error("validate-config", "--stage", "grpo", "-c", "r.yaml")
    assert (key, layer) == ("rewards", "r.yaml:3") and "needs at least one reward function" in msg
    Path("p.jsonl").write_text(json.dumps({"prompt": "p", "chosen": "a", "rejected": "b"}) + "\n")
    Path("r.yaml").write_text("data:\n  train: p.jsonl\nrewards:\n")
    ok("validate-config", "--stage", "dpo", "-c", "r.yaml")  # a stage without rewards: null is none


# --- registry names: did-you-mean, no torch ----------------------------------------------------------

REGISTRY_NAMES = [  # (stage, override, key, the name suggested): every name resolved through a registry
    ("grpo", "grpo.baseline_mode=grop_mean", "grpo.baseline_mode", "`group_mean`"),
    ("grpo", "grpo.baseline_mode=leave_one_uot", "grpo.baseline_mode", "`leave_one_out`"),
    ("grpo", "grpo.loss_fn=importance_sampl", "grpo.loss_fn", "`importance_sampling`"),
    ("grpo", "grpo.kl_penalty_mode=advantge", "grpo.kl_penalty_mode", "`advantage`"),
    ("grpo", "data.too_long=truncat", "data.too_long", "`truncate`"),
    ("grpo", "env.name=toolsm", "env.name", "'toolsim'"),
    ("grpo", "rewards=[numeric_mach]", "rewards[0].fn", "'numeric_match'"),
    ("ppo", "ppo.kl_penalty=kll", "ppo.kl_penalty", "`kl`"),
    ("awr", "awr.baseline=global_men", "awr.baseline", "`global_mean`"),
    ("rs_sft", "rs_sft.keep=bset", "rs_sft.keep", "`best`"),
]


def test_every_registry_name_is_checked_with_did_you_mean():
    for stage, override, key, guess in REGISTRY_NAMES:
        got, layer, msg = one_error("validate-config", "--stage", stage, "data.train=d.jsonl", "rewards=[exact_match]",
                                    override)
        assert (got, layer) == (key, "command line") and "did you mean" in msg.lower() and guess in msg, msg


def test_custom_baseline_is_a_module_function_found_without_importing_it():
    Path("my_baselines.py").write_text("raise SystemExit('imported')\ndef centred(r, g, v):\n    return r\n")
    ok(*GRPO, "grpo.baseline_mode=my_baselines:centred")
    key, _, msg = one_error(*GRPO, "grpo.baseline_mode=my_baselines:centered")
    assert key == "grpo.baseline_mode" and "Did you mean 'centred'?" in msg \
            and "baseline 'my_baselines:centered'" in msg
    _, _, msg = one_error(*GRPO, "grpo.baseline_mode=no_such_module_zz:fn")
    assert "no module named 'no_such_module_zz'" in msg
    _, _, msg = one_error(*GRPO, "grpo.baseline_mode=my_baselines.py:centred")  # get_baseline imports modules only
    assert "is not `package.module:function`" in msg


def test_custom_baseline_resolves_from_the_working_directory_at_train_time():
    from rlft.algos import get_baseline

    Path("cwd_baselines.py").write_text("def centred(r, g, v):\n    return r - r.mean()\n")
    try:
        assert get_baseline("cwd_baselines:centred").__name__ == "centred"
    finally:
        sys.modules.pop("cwd_baselines", None)
    assert str(Path.cwd()) not in sys.path


def test_checking_a_custom_baseline_imports_no_torch(tmp_path):
    Path("my_baselines.py").write_text("def centred(r, g, v):\n    return r\n")
    code = ("import sys; from typer.testing import CliRunner; from rlft.cli import app; "
            f"r = CliRunner().invoke(app, {[*GRPO, 'grpo.baseline_mode=my_baselines:centerd']!r}); "
            "assert r.exit_code == 2 and \"Did you mean 'centred'?\" in r.output, r.output; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]


# --- data rows that break JSON readers -----------------------------------------------------------------

def test_a_row_nested_too_deep_names_file_and_line():
    deep = "[" * 10_000 + "]" * 10_000
    Path("deep.jsonl").write_text(json.dumps(ROWS[0]) + "\n" + '{"prompt": ' + deep + "}\n")
    key, _, msg = one_error(*GRPO, "data.train=deep.jsonl")
    assert key == "data.train" and "deep.jsonl: line 2 nests" in msg
    Path("deep.json").write_text("[" + json.dumps(ROWS[0]) + ",\n" + '{"prompt": ' + deep + "}]")
    _, _, msg = one_error(*GRPO, "data.train=deep.json")
    assert "deep.json: line 2 nests" in msg


@pytest.mark.parametrize("name, text, line", [
    ("dup.jsonl", '{"prompt": "a", "answer": "1"}\n{"prompt": "a", "prompt": "b", "answer": "1"}\n', 2),
    ("dup.json", '[{"prompt": "a", "answer": "1"},\n {"prompt": "a",\n  "prompt": "b", "answer": "1"}]', 2),
    ("nested.jsonl", '{"prompt": [{"role": "user", "role": "system", "content": "hi"}], "answer": "1"}\n', 1),
])
def test_a_repeated_json_key_names_file_line_and_key(name, text, line):
    Path(name).write_text(text)
    key, _, msg = one_error(*GRPO, f"data.train={name}")
    dup = "role" if name.startswith("nested") else "prompt"
    assert key == "data.train" and f"{name}: line {line}: key '{dup}' appears twice" in msg


def test_a_repeated_key_is_refused_at_load_time_too():
    from rlft.data import DataError
    from rlft.data.load import load_table

    Path("dup.json").write_text('[{"prompt": "a", "prompt": "b"}]')  # datasets would keep "b" silently
    with pytest.raises(DataError, match="dup.json: line 1: key 'prompt' appears twice"):
        load_table("dup.json")


def test_a_repeated_csv_column_is_refused():
    Path("dup.csv").write_text("prompt,answer,prompt\na,1,b\n")
    key, _, msg = one_error(*GRPO, "data.train=dup.csv")
    assert key == "data.train" and "dup.csv: line 1: column 'prompt' appears twice" in msg


# --- settings that make a run train nothing -------------------------------------------------------------

def test_max_steps_zero_is_refused():
    key, layer, msg = one_error(*GRPO, "grpo.batch_size=2", "grpo.num_substeps=1", "train.max_steps=0")
    assert (key, layer) == ("train.max_steps", "command line") and "expected an integer >= 1 or -1" in msg
    ok(*GRPO, "grpo.batch_size=2", "grpo.num_substeps=1", "train.max_steps=-1")
    ok(*GRPO, "grpo.batch_size=2", "grpo.num_substeps=1", "train.max_steps=1")


def test_a_grpo_batch_larger_than_the_data_is_refused():
    key, layer, msg = one_error(*GRPO, "grpo.batch_size=1000000000000")
    assert (key, layer) == ("grpo.batch_size", "command line")
    assert "data.train (d.jsonl) has 16 rows" in msg and "between 1 and 16" in msg
    ok(*GRPO)  # 16 rows, 16 prompts a batch
    _, _, msg = one_error(*GRPO, "data.max_samples=4")
    assert "has 4 rows (data.max_samples 4)" in msg
    _, _, msg = one_error("validate-config", "--stage", "grpo", "data.train=demo", "rewards=[char_fraction]",
                          "grpo.batch_size=1000")
    assert "data.train (demo) has 64 rows" in msg
    # `rewards try` only scores: the data of its config need not fill a training batch
    Path("c.jsonl").write_text(json.dumps({"row": {"prompt": "q0", "answer": "0"}, "completion": "0"}) + "\n")
    ok("rewards", "try", "data.train=d.jsonl", "rewards=[exact_match]", "grpo.batch_size=1000", "--completions",
       "c.jsonl")


def test_a_huge_batch_size_is_answered_at_once():
    # the divisor hint once tried every number up to grpo.batch_size: a subprocess, so a hang fails the test
    proc = subprocess.run([sys.executable, "-m", "rlft.cli", *GRPO, "grpo.batch_size=1000000000001"],
                          capture_output=True, text=True, timeout=60, env={**os.environ, **ENV})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "error: grpo.num_substeps" in proc.stderr and "one of 1 " in proc.stderr
