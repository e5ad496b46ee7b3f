"""Adding a stage is one folder and one profile: a copy of rlft gets tests/fixtures/toy_stage as
rlft/stages/toy/ (spec with its own section and check, runner) and rlft/configs/stages/toy.yaml, no other
file changed, and validate-config, show-config --explain, train and report all know the stage."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT

pytestmark = pytest.mark.e2e
FIXTURE = ROOT / "tests" / "fixtures" / "toy_stage"


@pytest.fixture(scope="module")
def toy_rlft(tmp_path_factory):
    root = tmp_path_factory.mktemp("toyrlft")
    shutil.copytree(ROOT / "rlft", root / "rlft", ignore=shutil.ignore_patterns("__pycache__"))
    stage = root / "rlft" / "stages" / "toy"
    stage.mkdir()
    (stage / "__init__.py").write_text('"""The toy stage."""\n')
    for name in ("spec.py", "runner.py"):
        shutil.copy(FIXTURE / name, stage / name)
    shutil.copy(FIXTURE / "toy.yaml", root / "rlft" / "configs" / "stages" / "toy.yaml")
    return root


def _cli(root, *args):
    env = {**os.environ, "PYTHONPATH": str(root), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "rlft.cli", *map(str, args)], cwd=root, env=env,
                          capture_output=True, text=True, timeout=600)


def test_a_toy_stage_is_one_folder_and_one_profile(toy_rlft):
    res = _cli(toy_rlft, "validate-config", "--stage", "toy")
    assert res.returncode == 0, res.stderr
    assert "config OK: stage toy" in res.stdout
    res = _cli(toy_rlft, "--help")
    assert "toy" in res.stdout
    # its section is typed and ranged, its check runs, its note explains
    res = _cli(toy_rlft, "validate-config", "--stage", "toy", "toy.repeat=0")
    assert res.returncode == 2 and "toy.repeat" in res.stderr and "between 1 and 64" in res.stderr
    res = _cli(toy_rlft, "validate-config", "--stage", "toy", "toy.repeat=40", "train.max_seq_length=128")
    assert res.returncode == 2 and "do not fit train.max_seq_length (128)" in res.stderr
    res = _cli(toy_rlft, "validate-config", "--stage", "toy", "toy.repaet=2")
    assert res.returncode == 2 and "toy.repeat" in res.stderr  # did-you-mean over the new section
    res = _cli(toy_rlft, "show-config", "--stage", "toy", "--explain", "toy.note=hello")
    assert res.returncode == 0, res.stderr
    assert "toy:\n  repeat: 3" in res.stdout and "# toy: each completion is the answer letter x 3 (hello)" in res.stdout
    res = _cli(toy_rlft, "validate-config", "--stage", "grpo", "-c", "rlft/configs/examples/grpo_demo.yaml",
               "toy.repeat=2")
    assert res.returncode == 0 and "`toy` configures stage `toy`" in res.stderr  # another stage's section
    # it trains through rlft's run lifecycle and its run folder reports; the runner writes only `build`, and with
    # `rewards:` the lifecycle measures eval.start / eval.end as for every other stage
    out = toy_rlft / "runs" / "toy"
    rewards = toy_rlft / "toy_rewards.yaml"
    rewards.write_text("rewards:\n  - fn: char_fraction\ndata:\n  eval_prompts: 3\n")
    res = _cli(toy_rlft, "train", "--stage", "toy", "-c", rewards, f"train.output_dir={out}")
    assert res.returncode == 0, res.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and all(r["stage"] == "toy" and r["loss"] > 0 for r in rows)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["exit_code"] == 0
    assert (out / "final" / "adapter_config.json").is_file()
    start, end = summary["eval"]["start"], summary["eval"]["end"]
    assert start["prompts"] == end["prompts"] == 3 and start["eval_set"] == end["eval_set"]
    assert isinstance(start["reward_mean"], float) and isinstance(end["reward_mean"], float)
    assert "char_fraction" in end["per_reward"]
    samples = [json.loads(line) for line in (out / "eval_completions.jsonl").read_text().splitlines()]
    seen = sorted({(r["step"], r["prompt_id"]) for r in samples})
    assert seen == [(step, f"eval-{i}") for step in (0, 2) for i in range(3)]  # the start's samples and the end's
    assert f"rlft: eval: mean reward {start['reward_mean']} at the start, {end['reward_mean']} at the end" in res.stderr
    assert res.stderr.count("rlft: run folder") == 1  # the folder opened once, by the lifecycle's RunContext
    res = _cli(toy_rlft, "report", out)
    assert res.returncode == 0, res.stderr
    assert (out / "report" / "index.html").is_file()
