"""DAPO's dynamic sampling on single-turn GRPO (rlft/trainers/grpo_dynamic.py): the kept groups of several tries
stacked into one TRL batch (padding, row order, the gathered process-major layout), on hand-made tensors."""

from __future__ import annotations

import math

import pytest
import torch

from rlft.trainers.grpo_dynamic import (
    concat_outputs, keep_rows, process_major, reward_totals, sampling_metrics, take_rows,
)

PAD = 9


def trl_batch(prompts: list[list[int]], completions: list[list[int]], adv: list[float]) -> dict:
    """A TRL-shaped batch: prompts left-padded, completions right-padded, per-token log-probs = token id / 10."""
    P, C = max(map(len, prompts)), max(map(len, completions))
    pid = torch.tensor([[PAD] * (P - len(p)) + p for p in prompts])
    pm = torch.tensor([[0] * (P - len(p)) + [1] * len(p) for p in prompts])
    cid = torch.tensor([c + [PAD] * (C - len(c)) for c in completions])
    cm = torch.tensor([[1] * len(c) + [0] * (C - len(c)) for c in completions])
    return {"prompt_ids": pid, "prompt_mask": pm, "completion_ids": cid, "completion_mask": cm,
            "advantages": torch.tensor(adv), "num_items_in_batch": cm.sum(),
            "old_per_token_logps": cid.float() / 10 * cm}


def test_concat_pads_each_side_to_the_widest_try_and_take_rows_keeps_the_order():
    a = trl_batch([[1], [1]], [[5, 6, 7], [5]], [0.5, -0.5])
    b = trl_batch([[2, 3, 4], [2, 3, 4]], [[8], [8, 8]], [0.0, 0.0])
    both = concat_outputs([a, b], PAD)
    assert "num_items_in_batch" not in both  # a gathered count: recomputed on the kept rows
    assert both["prompt_ids"].tolist() == [[PAD, PAD, 1], [PAD, PAD, 1], [2, 3, 4], [2, 3, 4]]
    assert both["prompt_mask"].tolist() == [[0, 0, 1], [0, 0, 1], [1, 1, 1], [1, 1, 1]]
    assert both["completion_ids"].tolist() == [[5, 6, 7], [5, PAD, PAD], [8, PAD, PAD], [8, 8, PAD]]
    assert both["completion_mask"].tolist() == [[1, 1, 1], [1, 0, 0], [1, 0, 0], [1, 1, 0]]
    assert both["old_per_token_logps"].shape == (4, 3) and both["old_per_token_logps"][3].tolist() == \
        pytest.approx([0.8, 0.8, 0.0])
    assert both["advantages"].tolist() == [0.5, -0.5, 0.0, 0.0]
    kept = take_rows(both, [2, 3, 0])
    assert kept["completion_ids"].tolist() == [[8, PAD, PAD], [8, 8, PAD], [5, 6, 7]]
    assert kept["prompt_ids"][:, -1].tolist() == [4, 4, 1] and kept["advantages"].tolist() == [0.0, 0.0, 0.5]
    # the prompt and completion of each row still meet: the last real prompt token sits right before the completion
    for row in range(3):
        assert kept["prompt_mask"][row, -1] == 1 and kept["completion_mask"][row, 0] == 1


def test_concat_refuses_what_it_cannot_stack():
    a = trl_batch([[1]], [[5]], [0.0])
    with pytest.raises(NotImplementedError, match="pixel_values"):
        concat_outputs([{**a, "pixel_values": torch.zeros(1, 3)}, a], PAD)
    with pytest.raises(ValueError, match="differ in keys"):
        concat_outputs([a, {k: v for k, v in a.items() if k != "old_per_token_logps"}], PAD)


def test_keep_rows_per_process_first_groups_with_signal_in_sampling_order():
    # 2 processes x 2 groups of 2 per try; try 0: p0 (const, signal), p1 (const, const);
    # try 1: p0 (signal, signal), p1 (signal, const)
    signal = [[[False, True], [False, False]], [[True, True], [True, False]]]
    rows, kept = keep_rows(signal, want=2, group_size=2)
    assert rows[0] == [2, 3, 4, 5]  # p0's groups 1 (try 0) and 2 (try 1, its first group)
    assert rows[1] == [0, 1, 4, 5]  # p1 has one group with signal (try 1's first); its earliest constant one fills
    assert kept == [2, 1]


def test_process_major_matches_gathering_the_stacked_batches():
    # two tries gathered over 2 processes with 2 rows each: try t, process p, row i -> 100 t + 10 p + i
    tries = [torch.tensor([100 * t + 10 * p + i for p in range(2) for i in range(2)]) for t in range(2)]
    assert process_major(tries, 2).tolist() == [0, 1, 100, 101, 10, 11, 110, 111]
    assert process_major([[f"{t}{j}" for j in range(4)] for t in range(2)], 2) == \
        ["00", "01", "10", "11", "02", "03", "12", "13"]
    assert process_major(tries, 1).tolist() == [0, 1, 10, 11, 100, 101, 110, 111]


def test_reward_totals_and_sampling_metrics_on_the_kept_batch():
    rewards = torch.tensor([[1.0, 0.0], [0.0, float("nan")], [1.0, 1.0], [1.0, 1.0]])
    total, valid = reward_totals(rewards, torch.tensor([1.0, 0.5]))
    assert valid.tolist() == [True, False, True, True] and math.isnan(total[1]) and total[[0, 2, 3]].tolist() == \
        [1.0, 1.5, 1.5]
    m = sampling_metrics(torch.tensor([3, 5, 5, 2]), torch.tensor([False, True, True, False]), rewards,
                         torch.tensor([1.0, 0.5]), ["a", "b"], group_size=2, scale_rewards="group")
    assert m["completions/mean_length"] == 3.75 and m["completions/clipped_ratio"] == 0.5
    assert m["completions/mean_terminated_length"] == 2.5 and m["completions/max_terminated_length"] == 3
    assert m["rewards/a/mean"] == 0.75 and m["rewards/b/mean"] == pytest.approx(2 / 3)
    assert m["reward"] == pytest.approx((1.0 + 0.0 + 1.5 + 1.5) / 4)  # TRL's sum skips a failed reward
    assert m["frac_reward_zero_std"] == 0.5  # the second group (1.5, 1.5) is constant


def test_layout_refuses_groups_split_over_processes():
    """Each process refills and keeps whole groups of its own: grpo.batch_size must be divisible by the processes
    (checked by the layout, which the run computes before its folder)."""
    from rlft.config import load_config
    from rlft.errors import RunError
    from rlft.stages.grpo.layout import grpo_batch_layout

    def cfg(*overrides):
        return load_config("grpo", "cpu", [], ["grpo.group_size=4", "grpo.num_substeps=1",
                                               "grpo.dynamic_sampling=true", *overrides])[0]

    with pytest.raises(RunError, match=r"grpo.dynamic_sampling with 2 processes needs grpo.batch_size \(3\)"):
        grpo_batch_layout(cfg("grpo.batch_size=3"), num_processes=2)
    assert grpo_batch_layout(cfg("grpo.batch_size=4"), num_processes=2)["num_generations"] == 4
    assert grpo_batch_layout(cfg("grpo.batch_size=3"), num_processes=1)["num_generations"] == 4
    assert grpo_batch_layout(cfg("grpo.batch_size=3", "grpo.dynamic_sampling=false"), num_processes=2)
