"""Two CPU processes (`--hw ddp hw.device=cpu hw.num_processes=2`) share the sampling a single process would do
alone, with the single process's results: RS-SFT/AWR rounds and the eval pass split their generate calls over
the ranks (rlft.rollout.split), GRPO's ranks each get whole groups. Each test runs the same small config once in
one process and once in two."""

import json

import pytest

from conftest import read_jsonl, run_cli

pytestmark = pytest.mark.e2e
CPU = ["hw.device=cpu", "train.bf16=false", "train.tf32=null", "train.gradient_checkpointing=false",
       "train.dataloader_num_workers=0", "train.optim=adamw_torch", "train.max_seq_length=512"]


def _train(stage, demo, out, processes, *extra):
    hw = ["--hw", "cpu"] if processes == 1 else ["--hw", "ddp", f"hw.num_processes={processes}"]
    res = run_cli("train", "--stage", stage, *hw, "-c", demo, *CPU, *extra, f"train.output_dir={out}")
    assert res.returncode == 0, res.stderr[-3000:]
    return res


def _summary(out):
    return json.loads((out / "summary.json").read_text())


def test_awr_round_and_eval_sampled_on_two_processes_equal_one(tmp_path):
    # 6 prompts, 2 per generate call (16 completions / 8 samples): calls 0 and 2 on rank 0, call 1 on rank 1
    small = ["data.max_samples=6", "data.eval_prompts=6", "awr.rounds=1", "awr.generation_batch_size=16",
             "train.num_train_epochs=1", "train.per_device_train_batch_size=8", "train.gradient_accumulation_steps=1"]
    one, two = tmp_path / "one", tmp_path / "two"
    _train("awr", "configs/examples/awr_demo.yaml", one, 1, *small)
    res = _train("awr", "configs/examples/awr_demo.yaml", two, 2, *small)
    # the same rows in the same order, the same decision (AWR weights) on them: byte for byte
    assert (two / "samples.jsonl").read_bytes() == (one / "samples.jsonl").read_bytes()
    assert len(read_jsonl(two / "samples.jsonl")) == 6 * 8
    # ... but each process drew its share
    assert "prompts sampled per process 4/2" in res.stderr
    assert {m["sampling/prompts_per_rank"] for m in read_jsonl(one / "metrics.jsonl")} == {6}
    assert {m["sampling/prompts_per_rank"] for m in read_jsonl(two / "metrics.jsonl")} == {4}
    # the eval pass too (3 generate calls, split the same way): the same eval.start
    start_one, start_two = _summary(one)["eval"]["start"], _summary(two)["eval"]["start"]
    print(f"awr eval.start: 1 process {start_one['reward_mean']}, 2 processes {start_two['reward_mean']}")
    assert start_two == start_one and start_one["n"] == 6 * 8


def test_grpo_ranks_get_whole_groups_and_the_same_eval(tmp_path):
    # 4 prompts x 4 completions a step: 8 completions (two whole groups) per process
    small = ["train.max_steps=2", "train.per_device_train_batch_size=8", "grpo.batch_size=4", "grpo.group_size=4",
             "grpo.max_tokens=8", "data.eval_prompts=8", "monitor.log_completions=-1"]
    one, two = tmp_path / "one", tmp_path / "two"
    _train("grpo", "configs/examples/grpo_demo.yaml", one, 1, *small)
    _train("grpo", "configs/examples/grpo_demo.yaml", two, 2, *small)  # the hook checks each rank's groups too
    rows = read_jsonl(two / "completions.jsonl")
    assert [r["step"] for r in rows] == [1] * 16 + [2] * 16
    for step in (1, 2):
        ids = [r["prompt_id"] for r in rows if r["step"] == step]
        # completions.jsonl holds the batch gathered in rank order: rank 0's 8 rows, then rank 1's
        ranks = [ids[:8], ids[8:]]
        for mine in ranks:
            assert all(len(set(mine[g:g + 4])) == 1 for g in (0, 4)), ids  # two whole groups, one prompt each
        assert not set(ranks[0]) & set(ranks[1]), ids  # no prompt's group spans the two processes
    # eval.start (8 prompts, 4 per generate call: one call on each rank) equals the single process's
    start_one, start_two = _summary(one)["eval"]["start"], _summary(two)["eval"]["start"]
    print(f"grpo eval.start: 1 process {start_one['reward_mean']}, 2 processes {start_two['reward_mean']}")
    assert start_two == start_one and start_one["n"] == 8 * 4
