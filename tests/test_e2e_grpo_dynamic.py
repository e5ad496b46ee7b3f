"""DAPO's dynamic sampling on single-turn GRPO (TRL's trainer, rlft/trainers/grpo_dynamic.py) through the CLI on
the tiny model: a reward that leaves half the demo's prompts constant, so steps refill."""

import json
import statistics

import pytest

from conftest import read_jsonl, run_cli

pytestmark = pytest.mark.e2e

COIN_REWARD = '''
def coin(prompts, completions, **kwargs):
    """The demo's "Repeat the letter" prompts pay 0 whatever the completion (every such group constant); its
    "Write z many times" prompts pay 1 for an odd-length completion, so most of their groups carry signal."""
    return [0.0 if "Repeat" in str(p) else float(len(c) % 2) for p, c in zip(prompts, completions)]
'''
CPU_DDP = ["hw.device=cpu", "train.bf16=false", "train.tf32=null", "train.gradient_checkpointing=false",
           "train.dataloader_num_workers=0", "train.optim=adamw_torch", "train.max_seq_length=512"]


def coin_config(tmp_path, max_tries: int):
    (tmp_path / "coin_reward.py").write_text(COIN_REWARD)
    cfg = tmp_path / "coin.yaml"
    cfg.write_text(f"""model: {{name_or_path: tiny}}
data: {{train: demo, eval_prompts: 0}}
rewards: [{{fn: '{tmp_path / "coin_reward.py"}:coin'}}]
train: {{max_steps: 3, logging_steps: 1, save_steps: 3, per_device_train_batch_size: 16, learning_rate: 1.0e-3}}
grpo: {{group_size: 4, batch_size: 4, num_substeps: 1, ppo_epochs: 1, max_tokens: 6, kl_penalty_coef: 0.0,
       adaptive_kl: false, dynamic_sampling: true, dynamic_sampling_max_tries: {max_tries}}}
monitor: {{truncated_warn: 1.0, log_completions: -1}}
hw: {{cpu_threads: 1}}
""")
    return cfg


def _trained_groups(out) -> dict[int, list[dict]]:
    steps: dict[int, list[dict]] = {}
    for row in read_jsonl(out / "completions.jsonl"):
        steps.setdefault(row["step"], []).append(row)
    return steps


@pytest.mark.parametrize("processes", [1, 2], ids=["one-process", "ddp-2"])
def test_single_turn_dynamic_sampling_refills_constant_groups(tmp_path, processes):
    """Half the prompts give constant groups: each step samples again until it holds grpo.batch_size groups with
    signal, trains a full batch of them, and logs those (not the dropped) completions."""
    out = tmp_path / "run"
    hw = ["--hw", "cpu"] if processes == 1 else ["--hw", "ddp", "hw.num_processes=2", *CPU_DDP]
    res = run_cli("train", "--stage", "grpo", *hw, "-c", coin_config(tmp_path, 6), f"train.output_dir={out}")
    assert res.returncode == 0, res.stderr[-3000:]
    rows = read_jsonl(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3]
    print([(r["dynamic/tries"], r["dynamic/kept_groups"]) for r in rows])
    assert any(r["dynamic/tries"] > 1 for r in rows), rows  # refills happened
    assert all(1 <= r["dynamic/tries"] <= 6 for r in rows)
    assert all(r["dynamic/kept_groups"] == 4 for r in rows), rows  # and found the step's 4 groups with signal
    # TRL's metrics describe the batch trained on: no constant group in it
    assert all(r["frac_constant_groups"] == 0 and r["frac_reward_zero_std"] == 0 for r in rows), rows
    steps = _trained_groups(out)
    assert sorted(steps) == [1, 2, 3] and all(len(v) == 16 for v in steps.values())
    for step, v in steps.items():
        assert statistics.fmean([c["total"] for c in v]) == pytest.approx(rows[step - 1]["reward"])
        for k in range(0, 16, 4):
            group = v[k:k + 4]
            assert len({c["prompt_id"] for c in group}) == 1, group  # one prompt's group
            assert len({c["total"] for c in group}) > 1, group  # with signal
            assert "Write" in group[0]["prompt"]  # the constant prompts were dropped
            assert sum(c["advantage"] for c in group) == pytest.approx(0, abs=1e-5)
            assert all(1 <= c["completion_tokens"] <= 6 for c in group)
    assert "dynamic sampling:" not in res.stdout + res.stderr  # never out of tries
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == 3


def test_single_turn_out_of_tries_trains_on_what_it_has(tmp_path):
    """One try: a step short of groups with signal trains a full batch anyway, constant groups filling the rest,
    and says so once. With a KL penalty in the loss: the reference's log-probs (the LoRA policy with its adapter
    off) are taken once, on the kept rows, after the tries (rlft/trainers/grpo_dynamic.py), and TRL's KL reads them."""
    out = tmp_path / "run"
    res = run_cli("train", "--stage", "grpo", "--hw", "cpu", "-c", coin_config(tmp_path, 1),
                  f"train.output_dir={out}", "train.max_steps=4", "grpo.kl_penalty_coef=0.1",
                  "grpo.kl_penalty_mode=loss")
    assert res.returncode == 0, res.stderr[-3000:]
    rows = read_jsonl(out / "metrics.jsonl")
    assert all(r["dynamic/tries"] == 1 for r in rows) and len(rows) == 4
    assert rows[0]["kl_policy_ref"] == 0 and rows[-1]["kl_policy_ref"] > 0  # the adapter moved off the base
    assert any(r["dynamic/kept_groups"] < 4 for r in rows), rows
    assert all(len(v) == 16 for v in _trained_groups(out).values())
    said = [line for line in (res.stdout + res.stderr).splitlines() if "dynamic sampling:" in line]
    assert len(said) == 1 and "grpo.dynamic_sampling_max_tries" in said[0], said


def test_ddp_with_groups_split_over_processes_is_refused(tmp_path):
    """3 prompts over 2 processes: a process would refill half a group; the run says so and exits 2, before
    its run folder."""
    out = tmp_path / "run"
    res = run_cli("train", "--stage", "grpo", "--hw", "ddp", "hw.num_processes=2", *CPU_DDP,
                  "-c", coin_config(tmp_path, 4), f"train.output_dir={out}", "grpo.batch_size=3")
    assert res.returncode == 2, res.stderr[-3000:]
    assert "grpo.dynamic_sampling with 2 processes needs grpo.batch_size (3) divisible by 2" in res.stderr
    assert not out.exists() or not any(out.iterdir())  # refused before the run folder (the layout check)
