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


# every recipe learns the tool-use demo too. CISPO never clips the update, so at the demo's four optimizer steps
# per batch and lr 3e-3 it settles on the shaped reward (success 0.006 after 40 updates, as rlft's unclipped
# `importance_sampling` loss does: 0.006, and so RLOO, which uses it: 0.013 -> 0.009); one on-policy step per batch
# learns (CISPO 0.04 -> 0.997, RLOO 0.066 -> 0.997). DAPO falls off at four steps a batch
# too (0.031 -> 0.003) and learns on-policy (0.044 -> 0.997); LitePPO learns as the demo is (0.056 -> 0.988)
ON_POLICY = ["grpo.ppo_epochs=1", "grpo.num_substeps=1"]


@pytest.mark.parametrize("recipe, extra", [("dr_grpo", []), ("gspo", []), ("lite_ppo", []), ("cispo", ON_POLICY),
                                           ("rloo", ON_POLICY), ("dapo", ON_POLICY)])
def test_recipe_learns_the_tool_use_demo(recipe, extra, tmp_path):
    import statistics

    out = tmp_path / "run"
    res = run_cli("train", "--stage", "grpo", "--hw", "cpu", "-c", "configs/examples/tool_use_grpo.yaml", "-c",
                  f"configs/recipes/{recipe}.yaml", f"train.output_dir={out}", *extra)
    assert res.returncode == 0, res.stderr[-3000:]
    rows = [r for r in read_jsonl(out / "metrics.jsonl") if "episode_return" in r]
    assert len(rows) == 40
    first = statistics.fmean(r["success_rate"] for r in rows[:10])
    last = statistics.fmean(r["success_rate"] for r in rows[-10:])
    # the demo's own thresholds (tests/test_e2e_episodes.py::test_tool_use_grpo_learns)
    assert last > first + 0.4, (recipe, first, last)
    ev = json.loads((out / "summary.json").read_text())["eval"]
    assert ev["end"]["success_rate"] > ev["start"]["success_rate"] + 0.5, (recipe, ev)
