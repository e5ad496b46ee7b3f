"""Steps a user can read: validate-config says when max_steps trains every step on one sampled generation."""

from conftest import ROOT, run_cli

DEMO = ROOT / "configs" / "examples" / "grpo_demo.yaml"


def test_max_steps_within_one_generation_warns_with_the_arithmetic():
    res = run_cli("validate-config", "--stage", "grpo", "-c", DEMO, "train.max_steps=8", "grpo.num_substeps=2",
                  "grpo.ppo_epochs=4")
    assert res.returncode == 0
    assert "8 step(s) sample only 1 generation(s)" in res.stderr and "2 x 4 = 8 optimizer steps" in res.stderr
    assert "at least 16" in res.stderr


def test_two_generations_or_more_say_nothing():
    res = run_cli("validate-config", "--stage", "grpo", "-c", DEMO, "train.max_steps=16", "grpo.num_substeps=2",
                  "grpo.ppo_epochs=4")
    assert res.returncode == 0 and "generation(s)" not in res.stderr
