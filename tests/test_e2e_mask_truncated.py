"""End-to-end `mask_truncated` on rlft's loop through the CLI (tiny model, CPU): the tool-use GRPO demo over
episodes and the PPO demo, with small max_tokens so that some actions are cut and some end with EOS."""

import pytest

from conftest import read_jsonl, run_cli

pytestmark = pytest.mark.e2e
TOOL_GRPO = "configs/examples/tool_use_grpo.yaml"
SHORT = ("train.max_steps=3", "train.eval_steps=3", "train.save_steps=3", "data.eval_prompts=0")


def rows(out):
    return [r for r in read_jsonl(out / "metrics.jsonl") if "frac_truncated" in r]


def test_tool_use_grpo_masks_the_episodes_with_a_cut_turn(tmp_path):
    """One turn per episode at max_tokens 32: about 80-90% of the actions run into the budget. The masked share is
    the share of episodes with a cut turn (here: of turns), the rest still trains (a policy loss and a gradient)."""
    out = tmp_path / "run"
    res = run_cli("train", "--stage", "grpo", "--hw", "cpu", "-c", TOOL_GRPO, f"train.output_dir={out}", *SHORT,
                  "grpo.max_tokens=32", "grpo.mask_truncated=true", "env.max_episode_length=1",
                  "train.max_seq_length=512")
    assert res.returncode == 0, res.stderr[-3000:]
    got = rows(out)
    print([(r["frac_truncated"], r["frac_masked_truncated"], r["policy_loss"], r["grad_norm"]) for r in got])
    assert [r["step"] for r in got] == [1, 2, 3]
    for r in got:
        assert 0 < r["frac_masked_truncated"] < 1 and r["frac_masked_truncated"] == pytest.approx(r["frac_truncated"])
        assert r["policy_loss"] != 0 and r["grad_norm"] > 0
    eps = read_jsonl(out / "completions.jsonl")  # each logged episode says whether the loss left it out
    assert eps and all(isinstance(e["masked"], bool) for e in eps) and any(e["masked"] for e in eps)


def test_tool_use_grpo_demo_with_every_action_cut_trains_nothing(tmp_path):
    """The demo's max_tokens 2 cuts nearly every action by design (up to three turns an episode): every episode holds
    a cut turn and is left out of the loss whole, so the steps have no gradient; frac_truncated still counts turns
    (a turn that ended with EOS in a masked episode leaves it below 1). The `all_masked_truncated` health rule says
    so once on the console, naming the fix."""
    out = tmp_path / "run"
    res = run_cli("train", "--stage", "grpo", "--hw", "cpu", "-c", TOOL_GRPO, f"train.output_dir={out}", *SHORT,
                  "grpo.mask_truncated=true")
    assert res.returncode == 0, res.stderr[-3000:]
    got = rows(out)
    assert [r["step"] for r in got] == [1, 2, 3]
    print([(r["frac_truncated"], r["frac_masked_truncated"]) for r in got])
    assert all(r["frac_masked_truncated"] == 1.0 and r["frac_truncated"] > 0.9 for r in got), got
    assert all(r["policy_loss"] == 0 and r["grad_norm"] == 0 for r in got), got
    said = [line for line in (res.stdout + res.stderr).splitlines() if "frac_masked_truncated=" in line]
    assert len(said) == 1 and "nothing trains" in said[0], said  # the warning: once on the console, naming the fix
    assert "raise grpo.max_tokens, or turn grpo.mask_truncated off" in said[0], said
    fired = [h for h in read_jsonl(out / "health.jsonl") if h["rule"] == "all_masked_truncated"]
    assert [h["step"] for h in fired] == [1, 2, 3] and all(h["action"] == "warn" for h in fired), fired


def test_ppo_masks_the_cut_completions(tmp_path):
    out = tmp_path / "run"
    res = run_cli("train", "--stage", "ppo", "--hw", "cpu", "-c", "configs/examples/ppo_demo.yaml",
                  f"train.output_dir={out}", "ppo.max_tokens=32", "ppo.mask_truncated=true", "ppo.num_episodes=48",
                  "ppo.eval_interval=48", "ppo.save_interval=48", "ppo.log_interval=16", "data.eval_prompts=0")
    assert res.returncode == 0, res.stderr[-3000:]
    got = rows(out)
    assert [r["step"] for r in got] == [1, 2, 3]
    assert all(r["frac_masked_truncated"] == pytest.approx(r["frac_truncated"]) for r in got), got
    assert any(0 < r["frac_masked_truncated"] < 1 for r in got) and all(r["grad_norm"] > 0 for r in got), got
    logged = read_jsonl(out / "completions.jsonl")
    assert logged and all(isinstance(c["masked"], bool) for c in logged)


def test_single_turn_grpo_with_every_completion_cut_says_so_and_logs_no_entropy_over_no_tokens(tmp_path):
    """Single-turn GRPO (TRL's mask_truncated_completions) at max_tokens 1: every completion is cut and masked.
    frac_masked_truncated is in the rows, so `all_masked_truncated` warns; the token metrics over no tokens
    (entropy, the clip ratios, the KLs) have no value, so `entropy_collapse` does not fire on an entropy of 0."""
    out = tmp_path / "run"
    res = run_cli("train", "--stage", "grpo", "--hw", "cpu", "-c", "configs/examples/grpo_demo.yaml",
                  f"train.output_dir={out}", *SHORT, "grpo.max_tokens=1", "grpo.mask_truncated=true")
    assert res.returncode == 0, res.stderr[-3000:]
    got = rows(out)
    assert [r["step"] for r in got] == [1, 2, 3], got
    for r in got:
        assert r["frac_truncated"] == 1.0 and r["frac_masked_truncated"] == 1.0, r
        # no value (null in the row), never a 0 "measured" over no tokens
        assert r.get("entropy") is None and all(v is None for k, v in r.items() if k.startswith("clip_ratio")), r
    health = read_jsonl(out / "health.jsonl")
    assert [h["step"] for h in health if h["rule"] == "all_masked_truncated"] == [1, 2, 3], health
    assert not [h for h in health if h["rule"] == "entropy_collapse"], health
