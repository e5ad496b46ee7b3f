"""KL control on the demos, at the stage profiles' KL settings (coefficient 0.05, target_kl 0.1 nats per token,
adaptive, horizon a tenth of the run): the adaptive controller holds the per-token KL to the reference under the
health limit for the whole run while the reward rises.

Both runs are staged, RL after ORPO -> AWR, with KL to the AWR model: the random tiny model gives the demo's
letter about 2% of its mass, so from it no run could climb far under the limit (the README's bound)."""

import json
import shutil

import pytest

from conftest import ROOT, read_jsonl, run_cli

EXAMPLES = ROOT / "configs" / "examples"


def _check_kl_held(run, stage_summary, eval_gain, reward_gain, step_kl_max=0.3) -> tuple[list[float], list[float]]:
    rows = [r for r in read_jsonl(run / "metrics.jsonl") if "eval_reward" not in r and "kl_policy_ref" in r]
    kls = [r["kl_policy_ref"] for r in rows]
    coefs = [r["kl_coef"] for r in rows]
    assert coefs[0] == 0.05 and len(set(coefs)) > len(coefs) // 2, coefs  # it adapts once per sampled batch
    # under monitor.kl_critical in the health rule's window (the mean of 3 steps) on every step, and no single step far
    # over it
    window = [sum(kls[max(0, i - 2):i + 1]) / len(kls[max(0, i - 2):i + 1]) for i in range(len(kls))]
    assert max(window) < 0.3 and max(kls) < step_kl_max, (max(window), max(kls))
    health = read_jsonl(run / "health.jsonl") if (run / "health.jsonl").exists() else []
    assert not [h for h in health if h["rule"] == "kl_critical"], health
    rewards = [r["reward"] for r in rows]
    assert sum(rewards[-10:]) / 10 > sum(rewards[:10]) / 10 + reward_gain, rewards
    assert stage_summary["eval_end"] > stage_summary["eval_start"] + eval_gain, stage_summary
    assert json.loads((run / "summary.json").read_text())["status"] == "finished"
    return kls, coefs


@pytest.mark.e2e
def test_ppo_demo_with_kl_on(tmp_path):
    """Thresholds below the worst of seeds 1, 2, 3 x kernels avx2 and default (scripts/bench_demos.py --demos
    kl_ppo): a single update's KL at most 0.066-0.190, last 20 updates 0.052-0.092, eval gain 0.045-0.215 (under
    the pipeline's shared `eval:`: 8 samples per prompt at temperature 0.8), training reward gain 0.050-0.197;
    seed 42 (before the shared eval): KL at most 0.194, eval 0.447 -> 0.667, coefficient 0.05 -> 0.026 -> 0.064.
    At lr 5e-4 the step size keeps the KL near the target; the controller trims the coefficient."""
    res = run_cli("pipeline", "run", EXAMPLES / "pipeline_ppo_demo.yaml", cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    root = tmp_path / "runs" / "pipeline_ppo_demo"
    stages = json.loads((root / "pipeline_summary.json").read_text())["stages"]
    assert [s["stage"] for s in stages] == ["orpo", "awr", "ppo"]
    saved = (root / "03-ppo" / "config.yaml").read_text()
    assert "ref: init" in saved and "target_kl: 0.1 " in saved and "adaptive_kl: true" in saved
    kls, _ = _check_kl_held(root / "03-ppo", stages[-1], eval_gain=0.03, reward_gain=0.03)
    assert sum(kls[-20:]) / 20 < 0.15, kls[-20:]  # near the target (0.1) at the end


@pytest.mark.e2e
def test_grpo_demo_with_kl_on(tmp_path, pipeline_demo_run):
    """The pipeline demo's GRPO stage with the GRPO profile's KL settings (the demo turns KL off), a sixth of the
    demo's step size for 150 steps, temperature 0.8 and a constant rate. Measured over seeds 1, 2, 3, 42 x kernels
    avx512, avx2 and default, 1 and 2 threads (scripts/bench_demos.py --demos kl_grpo): a single step's KL at most
    0.097-0.357 (0.352: seed 42, the test's, on avx512; 0.357: seed 3 on default), the health rule's 3-step mean at
    most 0.063-0.264, training reward gain 0.100-0.397, eval gain 0.022-0.233 under the pipeline's shared `eval:`
    (AWR already ends at 0.92-0.97 there, so the stage mostly keeps its start). So no step may reach 0.45, 1.5x the
    limit. At lr 1e-3 (100 steps) two runs of six tripped kl_critical. Here the KL stays under the limit mostly
    because the reference already writes z's.

    Stages 1 and 2 are the demo's own (conftest's pipeline_demo_run, the same settings): a copy of its folder
    without the GRPO stage, which `pipeline run --resume` trains with KL on."""
    demo, trained = pipeline_demo_run
    assert trained.returncode == 0, trained.stderr[-3000:]
    shutil.copytree(demo / "runs", tmp_path / "runs", symlinks=True)
    shutil.rmtree(tmp_path / "runs" / "pipeline_demo" / "03-grpo")
    res = run_cli("pipeline", "run", EXAMPLES / "pipeline_demo.yaml", "--resume",
                  "stages.grpo.grpo.kl_penalty_coef=0.05", "stages.grpo.grpo.adaptive_kl=true",
                  "stages.grpo.train.learning_rate=5e-4",
                  "stages.grpo.train.max_steps=150", "stages.grpo.grpo.temperature=0.8",
                  "stages.grpo.train.lr_scheduler_type=constant", "stages.grpo.monitor.entropy_critical=0.05",
                  cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "stage 3 (grpo): starting grpo" in res.stderr, res.stderr[-3000:]
    root = tmp_path / "runs" / "pipeline_demo"
    stages = json.loads((root / "pipeline_summary.json").read_text())["stages"]
    _check_kl_held(root / "03-grpo", stages[-1], eval_gain=0.0, reward_gain=0.05, step_kl_max=0.45)
