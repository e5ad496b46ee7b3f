"""RLHF on the tiny model through the CLI: configs/examples/pipeline_rlhf.yaml (an rm stage, then GRPO against its
reward model named by `${stages.rm.final}`), and the `reward_model` reward in `rlft rewards try` on that model."""

import json

import pytest
import yaml

from conftest import ROOT, read_jsonl, run_cli

pytestmark = pytest.mark.e2e
PIPELINE = "configs/examples/pipeline_rlhf.yaml"


@pytest.fixture(scope="module")
def rlhf(tmp_path_factory):
    out = tmp_path_factory.mktemp("rlhf") / "runs"
    out.mkdir(parents=True)
    res = run_cli("pipeline", "run", ROOT / PIPELINE, cwd=out.parent)
    assert res.returncode == 0, res.stderr[-3000:]
    return out.parent / "runs" / "pipeline_rlhf", res


def test_grpo_trains_against_the_rm_stages_model(rlhf):
    root, res = rlhf
    rm_final = root / "01-rm" / "final"
    assert (rm_final / "config.json").is_file()
    grpo = root / "02-grpo"
    cfg = yaml.safe_load((grpo / "config.yaml").read_text())
    assert cfg["rewards"][0]["fn"] == "reward_model"
    assert cfg["rewards"][0]["kwargs"]["path"].endswith("pipeline_rlhf/01-rm/final")
    assert cfg["model"].get("init_from") in (None, "")  # the policy starts from the base model, not the RM
    ev = json.loads((grpo / "summary.json").read_text())["eval"]
    # the policy's score under the reward model rises on the held-out prompts, and every sample was scored
    assert ev["end"]["per_reward"]["reward_model"] > ev["start"]["per_reward"]["reward_model"] + 0.5
    assert ev["end"]["reward_failures"]["reward_model"] == 0
    assert "char_fraction" in ev["end"]["per_reward"]  # the verifier, scored on eval samples only
    rows = read_jsonl(grpo / "completions.jsonl")
    assert rows and all("reward_model" in r["rewards"] for r in rows)


def test_rewards_try_scores_with_the_reward_model(rlhf, tmp_path):
    root, _ = rlhf
    final = root / "01-rm" / "final"
    cfg = tmp_path / "try.yaml"
    cfg.write_text(json.dumps({"model": {"name_or_path": "tiny"}, "data": {"train": "demo"},
                               "rewards": [{"fn": "reward_model", "timeout_s": 120,
                                            "kwargs": {"path": str(final), "batch_size": 2}}]}))
    answers = ["zzzzzzzz", "zzzzzzzzzzzz", "qqqqqqqq", "hello there"]
    comps = tmp_path / "c.jsonl"
    comps.write_text("".join(json.dumps({"row": {"prompt": "Repeat the letter z: "}, "completion": a}) + "\n"
                             for a in answers))
    out = tmp_path / "scored.jsonl"
    res = run_cli("rewards", "try", "-c", cfg, "--completions", comps, "-o", out, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    scores = {r["completion"]: r["rewards"]["reward_model"] for r in read_jsonl(out)}
    assert min(scores["zzzzzzzz"], scores["zzzzzzzzzzzz"]) > max(scores["qqqqqqqq"], scores["hello there"])
    # normalize: fixed shifts and scales the same scores
    cfg.write_text(json.dumps({"model": {"name_or_path": "tiny"}, "data": {"train": "demo"},
                               "rewards": [{"fn": "reward_model", "timeout_s": 120,
                                            "kwargs": {"path": str(final), "normalize": "fixed", "mean": 1.0,
                                                       "std": 2.0}}]}))
    res = run_cli("rewards", "try", "-c", cfg, "--completions", comps, "-o", out, "--force", cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    fixed = {r["completion"]: r["rewards"]["reward_model"] for r in read_jsonl(out)}
    assert all(fixed[a] == pytest.approx((scores[a] - 1.0) / 2.0, abs=1e-4) for a in answers)
