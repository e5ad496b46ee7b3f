"""Mistakes caught before a model loads (or, at the latest, before a run folder exists): a mistyped local
model folder, a hub id that cannot be fetched, a reward column the data lacks, `--hw auto` in the config
commands; plus the health warning that names failed rewards and the CPU thread choice."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from conftest import run_cli
from rlft.cli import app
from rlft.config import load_config
from rlft.models.hardware import resolve_cpu_threads

DEMO = "configs/examples/grpo_demo.yaml"


def cli(*args):
    res = CliRunner().invoke(app, [str(a) for a in args])
    assert "Traceback" not in res.output
    return res


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_missing_local_model_folder_is_a_config_error_with_did_you_mean(in_tmp):
    (in_tmp / "models" / "smollm2-135m").mkdir(parents=True)
    (in_tmp / "models" / "qwen-0.5b").mkdir()
    res = cli("validate-config", "model.name_or_path=./models/smolm2-135m")
    assert res.exit_code == 2
    assert ("error: model.name_or_path (command line): model folder not found: ./models/smolm2-135m; "
            "did you mean `models/smollm2-135m`?") in res.stderr
    res = cli("validate-config", "model.name_or_path=models/zzz")  # `models/` exists here: a folder, not a hub id
    assert res.exit_code == 2 and "folders in models: qwen-0.5b, smollm2-135m" in res.stderr
    res = cli("validate-config", "model.name_or_path=org/some-model")  # a hub id: checked when it loads
    assert res.exit_code == 0, res.stderr


@pytest.mark.e2e
def test_hub_id_offline_is_one_line_and_leaves_no_run_folder(tmp_path):
    out = tmp_path / "run"
    res = run_cli("train", "-c", DEMO, f"train.output_dir={out}", "model.name_or_path=rlft-test/no-such-model-xyz",
                  env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")})
    assert res.returncode == 2, res.stderr[-3000:]
    assert "Traceback" not in res.stderr
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "cannot load `rlft-test/no-such-model-xyz`" in errors[0]
    assert "HF_HUB_OFFLINE is set" in errors[0]
    assert not out.exists()  # the corrected rerun is not blocked by a half-made run folder


def test_reward_column_missing_from_data_is_a_config_error(in_tmp):
    (in_tmp / "d.jsonl").write_text('{"prompt": "1+1?", "answer": "2"}\n' * 16)  # a whole grpo.batch_size
    res = cli("validate-config", "data.train=d.jsonl", "rewards=[{fn: numeric_match, kwargs: {column: answr}}]")
    assert res.exit_code == 2
    assert re.search(r"error: rewards\[0\]\.kwargs\.column \(command line\): reward `numeric_match` reads column "
                     r"`answr`, which data.train \(d.jsonl\) lacks \(columns: prompt, answer\); did you mean "
                     r"`answer`\?",
                     res.stderr), res.stderr
    res = cli("validate-config", "data.train=d.jsonl", "rewards=[exact_match]")  # default column `answer`: present
    assert res.exit_code == 0, res.stderr
    res = cli("validate-config", "data.train=d.jsonl", "rewards=[char_fraction]")  # default column `target`: absent
    assert res.exit_code == 2 and "error: rewards[0].fn" in res.stderr and "column `target`" in res.stderr
    res = cli("validate-config", "data.train=d.jsonl", "rewards=[{fn: char_fraction, kwargs: {char: x}}]")
    assert res.exit_code == 0, res.stderr


def test_reward_column_missing_from_eval_data_is_a_config_error(in_tmp):
    """data.eval is scored at every evaluation: a reward column it lacks is refused as data.train's is."""
    (in_tmp / "d.jsonl").write_text('{"prompt": "1+1?", "answer": "2"}\n' * 16)
    (in_tmp / "e.jsonl").write_text('{"prompt": "2+2?", "solution": "4"}\n' * 4)
    res = cli("validate-config", "data.train=d.jsonl", "data.eval=e.jsonl", "rewards=[exact_match]")
    assert res.exit_code == 2
    assert "reward `exact_match` reads column `answer`, which data.eval (e.jsonl) lacks (columns: prompt, solution)" \
        in res.stderr, res.stderr
    assert "data.train" not in res.stderr.split("reads column")[1].split("\n")[0]
    (in_tmp / "e.jsonl").write_text('{"prompt": "2+2?", "answer": "4"}\n' * 4)
    res = cli("validate-config", "data.train=d.jsonl", "data.eval=e.jsonl", "rewards=[exact_match]")
    assert res.exit_code == 0, res.stderr


@pytest.mark.parametrize("command", ["validate-config", "show-config"])
def test_hw_auto_in_config_commands(command, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    res = cli(command, "--hw", "auto", "-c", DEMO)
    assert res.exit_code == 0, res.stderr
    assert "rlft: --hw auto would pick `cpu`: no NVIDIA GPU listed" in res.stderr


def test_all_rewards_failed_says_so_with_the_count():
    pytest.importorskip("transformers")
    from rlft.monitor.health import evaluate_rules

    cfg, _, _ = load_config("grpo", "cpu", [DEMO])
    record = {"step": 3, "frac_constant_groups": 1.0, "frac_unscored": 1.0, "rewards/flaky/errors": 16.0,
              "rewards/char_fraction/errors": 0.0}
    fired = evaluate_rules(record, cfg)
    assert [f.rule for f in fired] == ["rewards_all_failed"]
    assert "every reward call failed" in fired[0].message and "16 failure(s): flaky: 16" in fired[0].message
    record = {"step": 3, "frac_constant_groups": 1.0, "frac_unscored": 0.0}
    assert [f.rule for f in evaluate_rules(record, cfg)] == ["all_groups_constant"]


def test_cpu_threads_auto_uses_the_affinity_and_warns_when_busy():
    assert resolve_cpu_threads(None) == (None, "cpu threads: torch default", None)
    n, note, warn = resolve_cpu_threads("auto", affinity=8, loadavg=0.2, cpu_count=16)
    assert (n, note, warn) == (8, "cpu threads 8 (auto: 8 usable cores)", None)
    n, note, warn = resolve_cpu_threads("auto", 2, affinity=8, loadavg=0.0, cpu_count=8)
    assert n == 4 and note == "cpu threads 4 (auto: 8 usable cores / 2 processes)" and warn is None
    n, note, warn = resolve_cpu_threads("auto", affinity=2, loadavg=1.5, cpu_count=2)
    assert n == 2 and "load average 1.5 on 2 cores, about 0.5 free" in warn and "hw.cpu_threads=1" in warn
    n, note, warn = resolve_cpu_threads(1, affinity=2, loadavg=3.0, cpu_count=2)
    assert n == 1 and note == "cpu threads 1 (hw.cpu_threads)" and "run when the machine is idle" in warn
    assert "hw.cpu_threads=" not in warn  # already the smallest count


def test_cpu_profile_uses_auto_threads():
    cfg, _, _ = load_config("grpo", "cpu")
    assert cfg.hw.cpu_threads == "auto"
    res = cli("validate-config", "hw.cpu_threads=0")
    assert res.exit_code == 2 and "expected an integer between 1 and 512 or auto or null" in res.stderr
