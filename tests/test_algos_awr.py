import math

import pytest
import torch

from rlft.algos import (
    awr_advantages, awr_metrics, awr_weights, effective_sample_size, fraction_clipped, keep_mask,
    normalize_advantages, weighted_nll,
)

NAN = float("nan")


# --- advantages -----------------------------------------------------------------------------

def test_group_mean_baseline_worked():
    # groups [1, 0, 0.5, 0.5] (mean 0.5) and [0, 0, 0, 1] (mean 0.25)
    adv = awr_advantages(torch.tensor([1.0, 0.0, 0.5, 0.5, 0.0, 0.0, 0.0, 1.0]), 4, "group_mean")
    assert adv.tolist() == pytest.approx([0.5, -0.5, 0, 0, -0.25, -0.25, -0.25, 0.75])


def test_global_mean_baseline_worked():
    adv = awr_advantages(torch.tensor([1.0, 0.0, 0.5, 0.5, 0.0, 0.0, 0.0, 1.0]), 4, "global_mean")
    assert adv.tolist() == pytest.approx([0.625, -0.375, 0.125, 0.125, -0.375, -0.375, -0.375, 0.625])


def test_unscored_excluded_from_baseline():
    adv = awr_advantages(torch.tensor([1.0, NAN, 0.0, 0.5]), 4, "group_mean")
    assert adv.tolist() == pytest.approx([0.5, 0.0, -0.5, 0.0])


def test_unknown_baseline():
    with pytest.raises(ValueError, match="group_mean, global_mean"):
        awr_advantages(torch.zeros(4), 2, "leave_one_out")


def test_normalize_population_std():
    # A = [-1.5, -0.5, 0.5, 1.5]: mean 0, population std sqrt(1.25)
    z = normalize_advantages(torch.tensor([-1.5, -0.5, 0.5, 1.5]))
    s = math.sqrt(1.25)
    assert z.tolist() == pytest.approx([-1.5 / s, -0.5 / s, 0.5 / s, 1.5 / s], rel=1e-6)


# --- weights --------------------------------------------------------------------------------

def test_weights_unnormalised_worked():
    # beta 1: w = exp(A) -> [e, 1, 1/e]
    w = awr_weights(torch.tensor([1.0, 0.0, -1.0]), beta=1.0, clip=10.0, normalize=False)
    assert w.tolist() == pytest.approx([math.e, 1.0, 1 / math.e], rel=1e-6)


def test_beta_multiplies():
    # beta 2 on A = 0.5 -> exp(1), not exp(0.25)
    w = awr_weights(torch.tensor([0.5]), beta=2.0, clip=10.0, normalize=False)
    assert w.item() == pytest.approx(math.e, rel=1e-6)


def test_weights_clipped_case():
    # normalised A = [-1, 1] (mean 0, population std 1); beta 5: exp(5) = 148.4 -> clip 10, exp(-5) = 0.006738
    w = awr_weights(torch.tensor([0.0, 2.0]), beta=5.0, clip=10.0, normalize=True)
    assert w.tolist() == pytest.approx([math.exp(-5), 10.0], rel=1e-5)
    assert fraction_clipped(w, 10.0).item() == 0.5
    # ESS = (10.006738)^2 / (2 * (100 + 4.54e-5)) = 0.50067
    assert effective_sample_size(w).item() == pytest.approx((10 + math.exp(-5)) ** 2 / (2 * (100 + math.exp(-10))),
                                                            rel=1e-6)


def test_all_equal_group_gives_uniform_weights():
    totals = torch.tensor([0.5, 0.5, 0.5, 0.5])
    adv = awr_advantages(totals, 4, "group_mean")
    assert adv.tolist() == [0.0] * 4
    w = awr_weights(adv, beta=5.0, clip=10.0, normalize=True)  # std 0: Â = 0 / (0 + 1e-8) = 0
    assert w.tolist() == [1.0] * 4
    assert effective_sample_size(w).item() == pytest.approx(1.0)
    assert fraction_clipped(w, 10.0).item() == 0.0


def test_invalid_weight_zero_and_excluded_from_normalisation():
    w = awr_weights(torch.tensor([0.0, NAN, 2.0]), beta=1.0, clip=100.0, normalize=True)
    assert w.tolist() == pytest.approx([math.exp(-1), 0.0, math.e], rel=1e-6)


def test_ess_extremes():
    assert effective_sample_size(torch.ones(8)).item() == pytest.approx(1.0)
    assert effective_sample_size(torch.tensor([1.0, 0, 0, 0])).item() == pytest.approx(0.25)
    assert effective_sample_size(torch.zeros(3)).item() == 0.0


def test_metrics_worked():
    adv = torch.tensor([0.0, 2.0, NAN])
    w = awr_weights(adv, beta=5.0, clip=10.0)
    m = awr_metrics(adv, w, 10.0)
    assert m["weight_max"] == pytest.approx(10.0)
    assert m["weight_mean"] == pytest.approx((10 + math.exp(-5)) / 2, rel=1e-6)
    assert m["frac_clipped"] == 0.5
    assert m["advantage_mean"] == pytest.approx(1.0)
    assert m["advantage_std"] == pytest.approx(1.0)
    assert m["ess"] == pytest.approx(0.50067, abs=1e-4)


# --- loss -----------------------------------------------------------------------------------

def test_weighted_nll_worked():
    logp = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, -9.0]])
    mask = torch.tensor([[0, 1, 1], [1, 1, 0]])
    w = torch.tensor([2.0, 0.5])
    # -(2 * (-2 - 3) + 0.5 * (-0.5 - 0.5)) / 4 tokens = (10 + 0.5) / 4
    assert weighted_nll(logp, mask, w).item() == pytest.approx(10.5 / 4)
    # num_tokens of the whole accumulated step, weights not renormalised
    assert weighted_nll(logp, mask, w, num_tokens=8).item() == pytest.approx(10.5 / 8)
    # unit weights = plain token-mean NLL
    assert weighted_nll(logp, mask, torch.ones(2)).item() == pytest.approx((5 + 1) / 4)


def test_weighted_nll_gradient_scales_with_weight():
    logp = torch.zeros(2, 2, requires_grad=True)
    w = torch.tensor([3.0, 1.0], requires_grad=True)
    weighted_nll(logp, torch.ones(2, 2), w).backward()
    assert logp.grad.tolist() == [[-0.75, -0.75], [-0.25, -0.25]]
    assert w.grad is None  # weights are detached


# --- keep rule ------------------------------------------------------------------------------

TOTALS = torch.tensor([0.2, 0.9, 0.7, 0.9,    # prompt 0: best 0.9 (first at index 1)
                       0.1, 0.3, 0.5, 0.0,    # prompt 1: nothing above 0.6
                       0.8, NAN, 0.65, 0.7])  # prompt 2: best 0.8, one unscored


def test_keep_best():
    keep = keep_mask(TOTALS, 4, "best", 0.6)
    assert keep.nonzero().flatten().tolist() == [1, 8]


def test_keep_above_threshold():
    keep = keep_mask(TOTALS, 4, "above_threshold", 0.6)
    assert keep.nonzero().flatten().tolist() == [1, 2, 3, 8, 10, 11]


def test_threshold_is_strict():
    keep = keep_mask(torch.tensor([0.6, 0.6000001]), 2, "above_threshold", 0.6)
    assert keep.tolist() == [False, True]


def test_cap_highest_first_deterministic_ties():
    # above threshold: 0.9 (1), 0.7 (2), 0.9 (3), 0.8 (8), 0.65 (10), 0.7 (11)
    keep = keep_mask(TOTALS, 4, "above_threshold", 0.6, max_samples=4)
    assert keep.nonzero().flatten().tolist() == [1, 2, 3, 8]  # 0.9, 0.9, 0.8, then the earlier 0.7
    keep = keep_mask(TOTALS, 4, "above_threshold", 0.6, max_samples=1)
    assert keep.nonzero().flatten().tolist() == [1]


def test_keep_never_unscored():
    keep = keep_mask(torch.tensor([NAN, NAN]), 2, "best", -1.0)
    assert not keep.any()
    keep = keep_mask(torch.tensor([0.9, 0.8]), 2, "best", 0.0, valid=torch.tensor([False, True]))
    assert keep.tolist() == [False, True]


def test_keep_rule_errors():
    with pytest.raises(ValueError, match="best, above_threshold"):
        keep_mask(TOTALS, 4, "top_frac", 0.6)
    with pytest.raises(ValueError, match="multiple of group_size"):
        keep_mask(TOTALS, 5, "best", 0.6)
