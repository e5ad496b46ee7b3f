import math

import pytest
import torch

from rlft.algos import (
    BASELINE_MODES,
    constant_group_mask,
    expand_group_mask,
    get_baseline,
    group_advantages,
    register_baseline,
)

TUTORIAL = torch.tensor([0, 0, 1, 0, 1, 1, 0, 1], dtype=torch.float32)


def double_centered(rewards_PG, group_size, valid_PG):
    """User baseline resolved through 'module:function' in the tests below."""
    r = rewards_PG.view(-1, group_size)
    return (2 * (r - r.mean(dim=1, keepdim=True))).reshape(-1)


@pytest.mark.parametrize(
    "group_size, expected",
    [
        (2, [0, 0, 0.5, -0.5, 0, 0, -0.5, 0.5]),
        (4, [-0.25, -0.25, 0.75, -0.25, 0.25, 0.25, -0.75, 0.25]),
        (8, [-0.5, -0.5, 0.5, -0.5, 0.5, 0.5, -0.5, 0.5]),
    ],
)
def test_group_mean_reproduces_tinker_tutorial(group_size, expected):
    adv = group_advantages(TUTORIAL, group_size, "group_mean")
    assert adv.tolist() == expected


def test_group_mean_std_hand_computed():
    adv = group_advantages(torch.tensor([1.0, 2.0, 3.0, 4.0]), 4, "group_mean_std")
    std = math.sqrt(5 / 3)  # unbiased: (2.25 + 0.25 + 0.25 + 2.25) / 3
    expected = [x / (std + 1e-4) for x in (-1.5, -0.5, 0.5, 1.5)]
    assert adv.tolist() == pytest.approx(expected, rel=1e-6)


def test_group_mean_std_matches_trl_bitwise():
    g = torch.Generator().manual_seed(0)
    rewards = torch.rand(24, generator=g)
    mean = rewards.view(-1, 6).mean(dim=1).repeat_interleave(6, dim=0)
    std = rewards.view(-1, 6).std(dim=1).repeat_interleave(6, dim=0)
    trl = (rewards - mean) / (std + 1e-4)
    assert torch.equal(group_advantages(rewards, 6, "group_mean_std"), trl)


def test_leave_one_out_hand_computed():
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]), 4, "leave_one_out")
    assert adv.tolist() == pytest.approx([1 - 1 / 3, 0 - 2 / 3, 0 - 2 / 3, 1 - 1 / 3])


def test_leave_one_out_needs_two_members():
    with pytest.raises(ValueError, match="group_size >= 2"):
        group_advantages(torch.tensor([1.0, 2.0]), 1, "leave_one_out")


def test_global_mean():
    adv = group_advantages(torch.tensor([0.0, 1.0, 2.0, 3.0]), 2, "global_mean")
    assert adv.tolist() == [-1.5, -0.5, 0.5, 1.5]


NAN = float("nan")


@pytest.mark.parametrize(
    "mode, expected",
    [
        # group 0 valid members [1, 0, 1]: mean 2/3; group 1 has a lone valid member -> 0
        ("group_mean", [1 / 3, 0, -2 / 3, 1 / 3, 0, 0, 0, 0]),
        # LOO: 1 - mean(0, 1) = 0.5, 0 - mean(1, 1) = -1
        ("leave_one_out", [0.5, 0, -1, 0.5, 0, 0, 0, 0]),
        # valid rewards overall [1, 0, 1, 5]: mean 7/4
        ("global_mean", [-0.75, 0, -1.75, -0.75, 3.25, 0, 0, 0]),
    ],
)
def test_invalid_entries_excluded_and_zeroed(mode, expected):
    rewards = torch.tensor([1.0, NAN, 0.0, 1.0, 5.0, NAN, NAN, NAN])
    valid = torch.tensor([True, False, True, True, True, False, False, False])
    adv = group_advantages(rewards, 4, mode, valid=valid)
    assert not torch.isnan(adv).any()
    assert adv.tolist() == pytest.approx(expected)


def test_invalid_entries_group_mean_std():
    rewards = torch.tensor([1.0, NAN, 3.0, 5.0, 7.0, float("inf")])
    valid = torch.tensor([True, False, True, True, True, False])
    adv = group_advantages(rewards[:4], 4, "group_mean_std", valid=valid[:4])
    # valid [1, 3, 5]: mean 3, unbiased std 2
    assert adv.tolist() == pytest.approx([-2 / 2.0001, 0, 0, 2 / 2.0001])
    # a lone valid member carries no signal
    lone = group_advantages(rewards[4:], 2, "group_mean_std", valid=valid[4:])
    assert lone.tolist() == [0.0, 0.0]


def test_custom_baseline_by_import_path():
    path = f"{__name__}:double_centered"
    assert get_baseline(path) is double_centered
    adv = group_advantages(TUTORIAL, 2, path)
    assert adv.tolist() == [0, 0, 1, -1, 0, 0, -1, 1]


def test_custom_baseline_by_decorator():
    @register_baseline("test_zero")
    def zero(rewards_PG, group_size, valid_PG):
        return torch.zeros_like(rewards_PG)

    assert "test_zero" not in BASELINE_MODES  # built-ins only
    assert group_advantages(TUTORIAL, 4, "test_zero").tolist() == [0.0] * 8


def test_unknown_baseline_lists_valid_names():
    with pytest.raises(ValueError) as err:
        get_baseline("median")
    for name in BASELINE_MODES:
        assert name in str(err.value)
    with pytest.raises(ValueError, match="group_mean_std"):
        get_baseline("no_such_module_xyz:fn")
    with pytest.raises(ValueError, match="cannot import"):
        get_baseline(f"{__name__}:missing_fn")


def test_builtin_modes():
    assert set(BASELINE_MODES) == {"group_mean", "group_mean_std", "group_mean_batch_std", "global_mean",
                                   "leave_one_out"}


def test_bad_length_raises():
    with pytest.raises(ValueError, match=r"multiple of group_size \(4\)"):
        group_advantages(torch.zeros(6), 4)


def test_constant_group_mask_keeps_one_of_three():
    rewards = torch.tensor([1, 1, 1, 1, 0, 1, 0, 1, 0, 0, 0, 0], dtype=torch.float32)
    mask = constant_group_mask(rewards, 4)
    assert mask.tolist() == [True, False, True]
    assert expand_group_mask(~mask, 4).tolist() == [False] * 4 + [True] * 4 + [False] * 4


def test_constant_group_mask_ignores_invalid():
    rewards = torch.tensor([1.0, NAN, 1.0, 0.0, 2.0, NAN])
    valid = torch.tensor([True, False, True, True, True, False])
    # groups of 2: [1, -] lone member counts as constant; [1, 0] is not; [2, -] lone
    assert constant_group_mask(rewards, 2, valid=valid).tolist() == [True, False, True]
    # groups of 3: valid [1, 1] constant; valid [0, 2] not
    assert constant_group_mask(rewards, 3, valid=valid).tolist() == [True, False]


def test_discounted_episode_returns_by_hand():
    from rlft.algos import discounted_returns

    r = torch.tensor([[2.0, -1.0, 4.0], [1.0, 0.0, 0.0]])
    # 2 - 0.5 + 0.25 * 4 = 2.5; 1
    assert discounted_returns(r, 0.5).tolist() == [2.5, 1.0]
    assert discounted_returns(r).tolist() == [5.0, 1.0]


def test_episode_group_advantages_spread_over_action_tokens():
    from rlft.algos import episode_group_advantages

    # two groups of two episodes; turn rewards (padded), gamma 0.5: returns 2.5, 0.5 | 1.0, 1.0
    turns = torch.tensor([[2.0, -1.0, 4.0], [1.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.5, 1.0, 0.0]])
    mask = torch.tensor([[1, 0, 1], [1, 1, 0], [1, 0, 0], [0, 1, 1]], dtype=torch.float32)
    adv = episode_group_advantages(turns, mask, 2, "group_mean", gamma=0.5)
    # group means 1.5 and 1.0 -> advantages 1.0, -1.0, 0.0, 0.0, on action tokens only
    assert adv.tolist() == [[1.0, 0.0, 1.0], [-1.0, -1.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
