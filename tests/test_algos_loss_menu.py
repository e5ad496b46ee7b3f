"""The pure pieces of the GRPO loss menu on worked numbers: the aggregations, GSPO's sequence ratio, clip-higher,
CISPO's capped stop-gradient weight and LitePPO's batch-std baseline."""

from __future__ import annotations

import math

import pytest
import torch

from rlft.algos import (
    LOSS_AGGREGATIONS, POLICY_LOSSES, aggregate_loss, cispo, clipped_surrogate, group_advantages,
    log_importance_weights,
)

T = torch.tensor
LOSS_BT = T([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
MASK_BT = T([[1, 1, 1], [1, 0, 0]])


def test_token_mean_weighs_every_token_the_same():
    assert aggregate_loss(LOSS_BT, MASK_BT, "token_mean").item() == pytest.approx((1 + 2 + 3 + 4) / 4)


def test_seq_mean_token_mean_weighs_every_sequence_the_same():
    assert aggregate_loss(LOSS_BT, MASK_BT, "seq_mean_token_mean").item() == pytest.approx((2.0 + 4.0) / 2)


def test_seq_mean_token_sum_norm_divides_by_the_constant():
    # (1 + 2 + 3) / 5 and 4 / 5, mean over the 2 sequences
    assert aggregate_loss(LOSS_BT, MASK_BT, "seq_mean_token_sum_norm", 5).item() == pytest.approx((6 / 5 + 4 / 5) / 2)
    with pytest.raises(ValueError, match="max_tokens"):
        aggregate_loss(LOSS_BT, MASK_BT, "seq_mean_token_sum_norm")


def test_masked_out_nan_never_leaks_into_an_aggregate():
    loss_BT = T([[1.0, float("nan")], [2.0, 3.0]])
    mask_BT = T([[1, 0], [1, 1]])
    for mode in LOSS_AGGREGATIONS.names():
        assert math.isfinite(aggregate_loss(loss_BT, mask_BT, mode, 2).item()), mode


def test_an_unknown_aggregation_names_the_closest():
    with pytest.raises(ValueError, match="token_mean"):
        aggregate_loss(LOSS_BT, MASK_BT, "token_men")


def test_the_sequence_ratio_is_the_mean_log_ratio_over_the_sequence_tokens():
    log_ratio_BT = T([[0.1, 0.3, 9.0], [0.4, 0.0, 0.0]])
    mask_BT = T([[1, 1, 0], [1, 0, 0]])
    assert log_importance_weights(log_ratio_BT, mask_BT, "token") is log_ratio_BT
    assert log_importance_weights(log_ratio_BT, mask_BT, "sequence").flatten().tolist() == pytest.approx([0.2, 0.4])


def test_clip_higher_lets_a_positive_advantage_push_further():
    # r = 1.5, A = 1: symmetric 0.2 stops at 1.2; clip_high 0.28 at 1.28. r = 0.5, A = -1: the low side 0.8 holds
    logp, old, adv, mask = torch.log(T([[1.5, 0.5]])), torch.zeros(1, 2), T([[1.0, -1.0]]), torch.ones(1, 2)
    sym, _ = clipped_surrogate(logp, old, adv, mask, 0.2)
    high, _ = clipped_surrogate(logp, old, adv, mask, 0.2, clip_high=0.28)
    assert sym.item() == pytest.approx((-1.2 + 0.8) / 2) and high.item() == pytest.approx((-1.28 + 0.8) / 2)


def test_the_sequence_level_clip_acts_on_the_whole_sequence():
    # tokens' ratios 1.1 and 1.5 -> the sequence ratio sqrt(1.65) ~ 1.2845, clipped at 1.28 for both tokens, A = 1
    logp = torch.log(T([[1.1, 1.5]]))
    loss, m = clipped_surrogate(logp, torch.zeros(1, 2), torch.ones(1, 2), torch.ones(1, 2), 0.2, clip_high=0.28,
                                is_level="sequence")
    assert loss.item() == pytest.approx(-1.28) and m["clipfrac"] == 1.0


def test_cispo_caps_the_weight_without_gradient_and_keeps_every_token_s_gradient():
    # r = 3 -> weight min(3, 1 + 1) = 2, r = 0.5 -> 0.5 (no low cap); loss = -mean(w A logp), dloss/dlogp = -w A / 2
    logp = torch.log(T([[3.0, 0.5]])).requires_grad_(True)
    adv = T([[1.0, -2.0]])
    loss, m = cispo(logp, torch.zeros(1, 2), adv, torch.ones(1, 2), 0.2, clip_high=1.0)
    assert loss.item() == pytest.approx(-(2.0 * 1.0 * math.log(3.0) + 0.5 * -2.0 * math.log(0.5)) / 2)
    loss.backward()
    assert logp.grad.flatten().tolist() == pytest.approx([-2.0 * 1.0 / 2, -0.5 * -2.0 / 2])  # PPO zeroes the first
    assert m["clipfrac"] == 0.5
    assert POLICY_LOSSES.get("cispo").fn is cispo and POLICY_LOSSES.get("cispo").clipped


def test_group_mean_batch_std_centres_per_group_and_scales_by_the_batch():
    rewards = T([0.0, 1.0, 2.0, 2.0])  # groups of 2: centred -0.5, 0.5, 0, 0; batch std (unbiased) of all four
    std = torch.std(rewards).item()
    got = group_advantages(rewards, 2, "group_mean_batch_std", eps=0.0)
    assert got.tolist() == pytest.approx([-0.5 / std, 0.5 / std, 0.0, 0.0])
    # an unscored completion is out of the batch std too, and gets 0
    valid = torch.tensor([True, True, True, False])
    got = group_advantages(T([0.0, 1.0, 2.0, float("nan")]), 2, "group_mean_batch_std", valid=valid, eps=0.0)
    std3 = torch.std(T([0.0, 1.0, 2.0])).item()
    assert got.tolist() == pytest.approx([-0.5 / std3, 0.5 / std3, 0.0, 0.0])
