"""`rlft rewards try` on the tiny model: re-scoring a finished GRPO run's completions reproduces its logged
scores until the reward file is edited, then shows what changed; fresh samples from the configured model."""

from __future__ import annotations

import pytest

from conftest import ROOT, read_jsonl, run_cli
from test_reward_try import written

pytestmark = pytest.mark.e2e
DEMO = ROOT / "configs/examples/grpo_demo.yaml"
VARIETY = ("def variety(prompts, completions, target, **kw):\n"
           "    return [len(set(c)) / (1 + len(c)) for c in completions]\n")


def _rows_by_name(stdout: str, first: str) -> list[str]:
    lines = stdout.splitlines()
    return lines[lines.index(first) + 1:]


def test_from_run_reproduces_logged_scores_then_shows_the_edit(tmp_path):
    reward = tmp_path / "my_reward.py"
    reward.write_text(VARIETY)
    cfg = tmp_path / "r.yaml"
    cfg.write_text("rewards:\n  - fn: char_fraction\n  - fn: my_reward.py:variety\n    weight: 0.5\n"
                   "monitor:\n  log_completions: -1\n")
    run = tmp_path / "run"
    res = run_cli("train", "--stage", "grpo", "--hw", "cpu", "-c", DEMO, "-c", cfg, f"train.output_dir={run}",
                  "train.max_steps=2", "data.eval_prompts=0")
    assert res.returncode == 0, res.stderr[-3000:]
    logged = read_jsonl(run / "completions.jsonl")
    assert len(logged) == 32

    res = run_cli("rewards", "try", "--from-run", run, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "32 completions of 4 prompts logged by" in res.stdout
    compared = _rows_by_name(res.stdout, "compared with the logged scores (32 completions):")
    assert [r.split()[-3:] for r in compared[1:4]] == [["0", "of", "32"]] * 3, res.stdout
    rescored = read_jsonl(written(res, tmp_path))
    assert [(r["step"], r["prompt_id"], r["completion"]) for r in rescored] == \
           [(r["step"], r["prompt_id"], r["completion"]) for r in logged]
    for new, old in zip(rescored, logged):  # GRPO logs float32 scores rounded to 6 decimals
        assert new["total"] == pytest.approx(old["total"], abs=1e-6)
        assert new["rewards"] == pytest.approx(old["rewards"], abs=1e-6)

    reward.write_text(VARIETY.replace("1 + len(c)", "2 + len(c)"))
    res = run_cli("rewards", "try", "--from-run", run, "-o", "edited.jsonl", cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    compared = _rows_by_name(res.stdout, "compared with the logged scores (32 completions):")
    char, variety, total = (r.split() for r in compared[1:4])
    assert char[-3:] == ["0", "of", "32"]
    assert variety[0] == "variety" and variety[-5:-2] == ["32", "of", "32"] and float(variety[2]) < float(variety[1])
    assert total[-5:-2] == ["32", "of", "32"]


def test_sample_scores_fresh_completions_of_the_tiny_model(tmp_path):
    res = run_cli("rewards", "try", "-c", DEMO, "--sample", "2", "--max-prompts", "3", cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "6 completions of 3 prompts sampled from tiny, 2 per prompt" in res.stdout
    assert any(line.startswith("char_fraction") for line in res.stdout.splitlines())
    assert "verdict [" in res.stdout
    rows = read_jsonl(written(res, tmp_path))
    assert [r["prompt_id"] for r in rows] == [0, 0, 1, 1, 2, 2]
    assert all(set(r["rewards"]) == {"char_fraction"} and r["total"] is not None for r in rows)
    # nothing trained, no run folder: the one folder under runs/ holds the trial's rows
    assert [p.name for p in (tmp_path / "runs").iterdir()] == [written(res, tmp_path).parent.name]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]
