"""Every GRPO loss recipe (configs/recipes/) learns the GRPO demo, layered over it as a user would."""

import json
from pathlib import Path

import pytest

from conftest import read_jsonl, run_cli

pytestmark = pytest.mark.e2e
DEMO = "configs/examples/grpo_demo.yaml"
RECIPES = sorted(p.stem for p in (Path(__file__).resolve().parents[1] / "configs" / "recipes").glob("*.yaml"))


@pytest.mark.parametrize("recipe", RECIPES)
def test_recipe_learns_the_demo(recipe, tmp_path):
    out = tmp_path / "run"
    res = run_cli("train", "--stage", "grpo", "--hw", "cpu", "-c", DEMO, "-c", f"configs/recipes/{recipe}.yaml",
                  f"train.output_dir={out}")
    assert res.returncode == 0, res.stderr[-3000:]
    rows = [r for r in read_jsonl(out / "metrics.jsonl") if "eval_reward" not in r]
    assert len(rows) == 60
    summary = json.loads((out / "summary.json").read_text())
    # the demo's own threshold (tests/test_e2e_grpo.py): the held-out eval at the end
    assert summary["eval"]["end"]["reward_mean"] > 0.9, (recipe, summary["eval"])
