"""End-to-end PPO runs through the CLI on the built-in tiny model (CPU)."""

import json
import statistics

import pytest

from conftest import interrupt_after_checkpoint, read_jsonl, run_cli

pytestmark = pytest.mark.e2e
DEMO = "configs/examples/ppo_demo.yaml"
REQUIRED = ["step", "reward", "reward_std", "rewards/char_fraction/mean", "loss", "policy_loss", "value_loss",
            "entropy", "approx_kl", "clipfrac", "value_clipfrac", "explained_variance", "kl_policy_ref", "kl_coef",
            "advantage_mean", "return_mean", "completion_length", "episodes", "grad_norm", "learning_rate", "step_time"]


def test_demo_learns(tmp_path):
    out = tmp_path / "run"
    res = run_cli("train", "--stage", "ppo", "--hw", "cpu", "-c", DEMO, f"train.output_dir={out}")
    assert res.returncode == 0, res.stderr[-3000:]
    rows = [r for r in read_jsonl(out / "metrics.jsonl") if "eval_reward" not in r]
    assert [r["step"] for r in rows] == list(range(1, 51))
    assert [r["episodes"] for r in rows][-1] == 800
    evals = [r for r in read_jsonl(out / "metrics.jsonl") if "eval_reward" in r]
    assert [r["step"] for r in evals] == [25]
    first = statistics.fmean(r["reward"] for r in rows[:10])
    last = statistics.fmean(r["reward"] for r in rows[-10:])
    # thresholds below the worst of 3 seeds x 2 kernels (scripts/bench_demos.py --demos ppo): first 0.020-0.038,
    # last 0.601-0.972, eval gain 0.579-0.975
    assert first < 0.2 and last > 0.5, (first, last)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == 50
    start, end = summary["eval"]["start"]["reward_mean"], summary["eval"]["end"]["reward_mean"]
    assert end > start + 0.45, (start, end)
    final = out / "final"
    assert (final / "adapter_config.json").is_file() and (final / "value_head.safetensors").is_file()
    # the adapter loads with PEFT alone onto the base model (recorded by the name the run gave it)
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from rlft.tiny import ensure_tiny_model

    assert json.loads((final / "adapter_config.json").read_text())["base_model_name_or_path"] == "tiny"
    base = AutoModelForCausalLM.from_pretrained(str(ensure_tiny_model()))
    PeftModel.from_pretrained(base, str(final))


def test_kl_estimators_and_adaptive_controller(tmp_path):
    for kind in ("kl", "abs", "mse", "full"):
        out = tmp_path / kind
        res = run_cli("train", "--stage", "ppo", "--hw", "cpu", "-c", DEMO, f"train.output_dir={out}",
                      "ppo.num_episodes=48", "ppo.init_kl_coef=0.05", "ppo.adaptive_kl=true", f"ppo.kl_penalty={kind}",
                      "ppo.kl_horizon=100", "monitor.on_critical=warn")
        assert res.returncode == 0, res.stderr[-3000:]
        rows = [r for r in read_jsonl(out / "metrics.jsonl") if "eval_reward" not in r]
        assert len(rows) == 3
        for row in rows:
            missing = [k for k in REQUIRED if k not in row or row[k] is None]
            assert not missing, missing
        assert rows[0]["kl_coef"] == 0.05 and rows[-1]["kl_coef"] != 0.05  # the controller moved it
        if kind in ("abs", "mse", "full"):
            assert all(r["kl_penalty"] >= 0 for r in rows)


def test_sigterm_then_resume_matches_uninterrupted(tmp_path):
    short = ["ppo.num_episodes=128", "ppo.save_interval=32", "ppo.init_kl_coef=0.05", "ppo.adaptive_kl=true",
             "ppo.kl_horizon=100", "monitor.on_critical=warn"]
    out = tmp_path / "run"
    interrupt_after_checkpoint(out, 2, "train", "--stage", "ppo", "--hw", "cpu", "-c", DEMO, f"train.output_dir={out}",
                               *short)
    stopped_at = max(r["step"] for r in read_jsonl(out / "metrics.jsonl") if "eval_reward" not in r)
    assert stopped_at < 8
    state = json.loads((out / "checkpoints" / f"checkpoint-{stopped_at}" / "rlft_state.json").read_text())
    assert state["kl_controller"]["value"] != 0.05

    res = run_cli("train", "--stage", "ppo", "--hw", "cpu", "-c", DEMO, f"train.output_dir={out}", *short, "--resume")
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"from step {stopped_at} to step 8" in res.stderr
    rows = [r for r in read_jsonl(out / "metrics.jsonl") if "eval_reward" not in r]
    assert [r["step"] for r in rows] == list(range(1, 9))

    ref = tmp_path / "ref"
    res = run_cli("train", "--stage", "ppo", "--hw", "cpu", "-c", DEMO, f"train.output_dir={ref}", *short)
    assert res.returncode == 0, res.stderr[-3000:]
    ref_rows = [r for r in read_jsonl(ref / "metrics.jsonl") if "eval_reward" not in r]
    for a, b in zip(rows, ref_rows):  # same episodes, same kl_coef after the resume
        assert a["reward"] == b["reward"] and a["kl_coef"] == b["kl_coef"], (a["step"], a, b)
    from safetensors.torch import load_file

    for name in ("adapter_model.safetensors", "value_head.safetensors"):
        x, y = load_file(str(out / "final" / name)), load_file(str(ref / "final" / name))
        assert x.keys() == y.keys()
        assert all((x[k] == y[k]).all() for k in x), name  # bit-exact
    s1, s2 = (json.loads((d / "summary.json").read_text()) for d in (out, ref))
    assert s1["eval"] == s2["eval"]

    again = run_cli("train", "--stage", "ppo", "--hw", "cpu", "-c", DEMO, f"train.output_dir={out}", *short, "--resume")
    assert again.returncode == 2 and "nothing left to do" in again.stderr


def test_health_rollback_restores_adapter_and_value_head(tmp_path):
    out = tmp_path / "run"
    res = run_cli("train", "--stage", "ppo", "--hw", "cpu", "-c", DEMO, f"train.output_dir={out}",
                  "ppo.num_episodes=96", "ppo.save_interval=32", "monitor.on_critical=rollback",
                  faults={"RLFT_FAULT_NAN_LOSS_AT_STEP": "3"})
    assert res.returncode == 0, res.stderr[-3000:]
    health = read_jsonl(out / "health.jsonl")
    rolled = [h for h in health if h["rule"] == "rollback"]
    assert rolled and rolled[0]["source"] == "checkpoint-2", health
    assert json.loads((out / "summary.json").read_text())["status"] == "finished"
    # the lower learning rate lasts: the scheduler (accelerate's wrapper here) keeps it, not only the param groups
    rows = [r for r in read_jsonl(out / "metrics.jsonl") if "eval_reward" not in r]
    cut = rolled[0]["lr_factor"] ** len(rolled)
    assert rows[-1]["learning_rate"] == pytest.approx(rows[0]["learning_rate"] * cut), (rows[0], rows[-1])


def _ddp_run(out, *extra) -> list[dict]:
    """The demo for 64 episodes on 2 CPU processes; its training rows, once the processes ended in sync."""
    res = run_cli("train", "--stage", "ppo", "--hw", "ddp", "-c", DEMO, "hw.device=cpu", "hw.num_processes=2",
                  "train.bf16=false", "train.tf32=null", "train.gradient_checkpointing=false", "ppo.num_episodes=64",
                  *extra, f"train.output_dir={out}")
    assert res.returncode == 0, res.stderr[-3000:]
    dist = json.loads((out / "distributed.json").read_text())
    assert dist["num_processes"] == 2 and dist["in_sync"], dist
    rows = [r for r in read_jsonl(out / "metrics.jsonl") if "eval_reward" not in r]
    assert [r["step"] for r in rows] == [1, 2, 3, 4] and rows[-1]["episodes"] == 64
    return rows


def test_ddp_two_cpu_processes(tmp_path):
    out = tmp_path / "run"
    _ddp_run(out, "ppo.init_kl_coef=0.05")
    assert (out / "final" / "value_head.safetensors").is_file()


def test_init_from_an_earlier_run(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    res = run_cli("train", "--stage", "ppo", "--hw", "cpu", "-c", DEMO, f"train.output_dir={first}",
                  "ppo.num_episodes=48")
    assert res.returncode == 0, res.stderr[-3000:]
    res = run_cli("train", "--stage", "ppo", "--hw", "cpu", "-c", DEMO, f"train.output_dir={second}",
                  f"model.init_from={first}", "ppo.num_episodes=16", "ppo.init_kl_coef=0.05")
    assert res.returncode == 0, res.stderr[-3000:]
    end_first = json.loads((first / "summary.json").read_text())["eval"]["end"]
    start_second = json.loads((second / "summary.json").read_text())["eval"]["start"]
    assert start_second == end_first  # same weights, same evaluation seed
    row = read_jsonl(second / "metrics.jsonl")[0]
    assert abs(row["kl_policy_ref"]) < 1e-6  # the reference is the starting model


def test_full_fine_tuning_with_a_frozen_reference(tmp_path):
    out = tmp_path / "run"
    res = run_cli("train", "--stage", "ppo", "--hw", "cpu", "-c", DEMO, f"train.output_dir={out}", "lora.enabled=false",
                  "ppo.num_episodes=32", "ppo.init_kl_coef=0.05", "train.learning_rate=1e-4")
    assert res.returncode == 0, res.stderr[-3000:]
    rows = [r for r in read_jsonl(out / "metrics.jsonl") if "eval_reward" not in r]
    assert abs(rows[0]["kl_policy_ref"]) < 1e-6 and rows[1]["kl_policy_ref"] != 0  # a copy of the start, frozen
    assert (out / "final" / "model.safetensors").is_file() and (out / "final" / "value_head.safetensors").is_file()


def test_early_stop_kl_through_the_cli(tmp_path):
    """ppo.early_stop_kl from the command line: a bound no update can stay under skips all but each update's first
    step (the demo runs 2 epochs of 2 minibatches: 4 steps per update), and says so in every row; 0 is refused."""
    out = tmp_path / "run"
    res = run_cli("train", "--stage", "ppo", "--hw", "cpu", "-c", DEMO, f"train.output_dir={out}",
                  "ppo.num_episodes=32", "ppo.early_stop_kl=1e-12")
    assert res.returncode == 0, res.stderr[-3000:]
    rows = [r for r in read_jsonl(out / "metrics.jsonl") if "eval_reward" not in r]
    assert len(rows) == 2 and all(r["early_stop"] == 0.75 for r in rows), rows
    bad = run_cli("validate-config", "--stage", "ppo", "--hw", "cpu", "-c", DEMO, "ppo.early_stop_kl=0")
    assert bad.returncode == 2 and "ppo.early_stop_kl" in bad.stderr + bad.stdout


def test_rollback_kl_through_the_cli(tmp_path):
    """ppo.rollback_kl from the command line: a bound every step crosses undoes each update's first step (checked on
    the second), so the policy never moves: the final adapter is the fresh one, eval end equals eval start, every
    row says `rollback` 1 and the learning rate halves per update (the checkpoint's scheduler keeps it); fsdp and 0
    are refused."""
    out = tmp_path / "run"
    res = run_cli("train", "--stage", "ppo", "--hw", "cpu", "-c", DEMO, f"train.output_dir={out}",
                  "ppo.num_episodes=32", "ppo.save_interval=16", "ppo.rollback_kl=1e-12", "train.warmup_ratio=0",
                  "train.lr_scheduler_type=constant")
    assert res.returncode == 0, res.stderr[-3000:]
    rows = [r for r in read_jsonl(out / "metrics.jsonl") if "eval_reward" not in r]
    assert [r["rollback"] for r in rows] == [1.0, 1.0], rows
    lr = rows[0]["learning_rate"] * 2
    assert [r["learning_rate"] for r in rows] == pytest.approx([lr / 2, lr / 4])
    import torch
    from safetensors.torch import load_file

    lora_B = [t for k, t in load_file(out / "final" / "adapter_model.safetensors").items() if "lora_B" in k]
    assert lora_B and all(not t.any() for t in lora_B)  # PEFT starts B at zero: no step was kept
    summary = json.loads((out / "summary.json").read_text())
    assert summary["eval"]["start"]["reward_mean"] == summary["eval"]["end"]["reward_mean"]
    sched = torch.load(out / "checkpoints" / "checkpoint-2" / "scheduler.pt", weights_only=False)
    assert sched["base_lrs"] and all(b == pytest.approx(lr / 4) for b in sched["base_lrs"])
    for bad_args, key in ((["ppo.rollback_kl=0"], "ppo.rollback_kl"), (["--hw", "fsdp", "ppo.rollback_kl=0.01"],
                                                                       "ppo.rollback_kl")):
        hw = [] if "--hw" in bad_args else ["--hw", "cpu"]
        bad = run_cli("validate-config", "--stage", "ppo", *hw, "-c", DEMO, *bad_args)
        assert bad.returncode == 2 and key in bad.stderr + bad.stdout, bad.stderr + bad.stdout


def test_rollback_kl_under_ddp_keeps_the_processes_in_step(tmp_path):
    """ppo.rollback_kl on 2 processes: every process undoes the same steps (the KL is all-reduced), so the weights
    stay in sync, and the learning rate is the configured one halved once per update that undid a step."""
    rows = _ddp_run(tmp_path / "run", "ppo.rollback_kl=0.05")
    undone = [r["rollback"] for r in rows]
    assert set(undone) <= {0.0, 1.0}, undone
    assert sum(undone) >= 1, undone  # the demo's steps at lr 3e-3 cross 0.05 (3 of 4 updates on this CPU)
    for i, row in enumerate(rows):
        assert row["learning_rate"] == pytest.approx(3e-3 / 2 ** sum(undone[:i + 1])), (i, undone)


def test_advantage_norm_none_keeps_the_raw_advantages(tmp_path):
    """ppo.advantage_norm: `whiten` (the default) logs advantages of mean ≈ 0 and std ≈ 1; `none` the raw GAE
    advantages, whose spread is the returns' (the demo's rewards are fractions, far below 1)."""
    stds = {}
    for norm in ("whiten", "none"):
        out = tmp_path / norm
        res = run_cli("train", "--stage", "ppo", "--hw", "cpu", "-c", DEMO, f"train.output_dir={out}",
                      "ppo.num_episodes=32", f"ppo.advantage_norm={norm}")
        assert res.returncode == 0, res.stderr[-3000:]
        rows = [r for r in read_jsonl(out / "metrics.jsonl") if "eval_reward" not in r]
        assert len(rows) == 2
        stds[norm] = [r["advantage_std"] for r in rows]
        if norm == "whiten":
            assert all(abs(r["advantage_mean"]) < 1e-4 for r in rows), rows
    assert all(abs(s - 1) < 0.05 for s in stds["whiten"]), stds
    assert all(abs(s - 1) > 0.3 for s in stds["none"]), stds


def test_separate_critic_runs_resumes_and_leaves_a_plain_adapter(tmp_path):
    """ppo.value_model=separate: the run writes the policy's plain PEFT adapter, the checkpoints carry the critic's
    LoRA in value_head.safetensors, and a SIGTERM + --resume ends on the uninterrupted run's weights bit for bit
    (the critic's included)."""
    from safetensors.torch import load_file

    short = ["ppo.num_episodes=96", "ppo.save_interval=32", "ppo.value_model=separate"]
    out, ref = tmp_path / "run", tmp_path / "ref"
    interrupt_after_checkpoint(out, 2, "train", "--stage", "ppo", "--hw", "cpu", "-c", DEMO, f"train.output_dir={out}",
                               *short)
    stopped_at = max(r["step"] for r in read_jsonl(out / "metrics.jsonl") if "eval_reward" not in r)
    assert stopped_at < 6
    saved = load_file(str(out / "checkpoints" / f"checkpoint-{stopped_at}" / "value_head.safetensors"))
    assert any(k.startswith("critic.") and "lora_" in k for k in saved), list(saved)
    res = run_cli("train", "--stage", "ppo", "--hw", "cpu", "-c", DEMO, f"train.output_dir={out}", *short, "--resume")
    assert res.returncode == 0, res.stderr[-3000:]
    res = run_cli("train", "--stage", "ppo", "--hw", "cpu", "-c", DEMO, f"train.output_dir={ref}", *short)
    assert res.returncode == 0, res.stderr[-3000:]
    for name in ("adapter_model.safetensors", "value_head.safetensors"):
        x, y = load_file(str(out / "final" / name)), load_file(str(ref / "final" / name))
        assert x.keys() == y.keys()
        assert all((x[k] == y[k]).all() for k in x), name  # bit-exact
    assert not any("critic" in k for k in load_file(str(ref / "final" / "adapter_model.safetensors")))
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from rlft.tiny import ensure_tiny_model

    PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(str(ensure_tiny_model())), str(ref / "final"))


def test_separate_critic_with_an_async_sampler(tmp_path):
    """ppo.value_model=separate with ppo.async: the sampler copies the policy alone; the learner's critic scores."""
    from safetensors.torch import load_file

    out = tmp_path / "run"
    res = run_cli("train", "--stage", "ppo", "--hw", "cpu", "-c", DEMO, f"train.output_dir={out}",
                  "ppo.num_episodes=48", "ppo.value_model=separate", "ppo.async.max_steps_off_policy=1")
    assert res.returncode == 0, res.stderr[-3000:]
    assert len([r for r in read_jsonl(out / "metrics.jsonl") if "eval_reward" not in r]) == 3
    assert any(k.startswith("critic.") for k in load_file(str(out / "final" / "value_head.safetensors")))
