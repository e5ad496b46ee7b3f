import pytest
import torch

from rlft.algos import (
    discounted_future_sum,
    entropy_from_logp,
    k3_kl,
    kl_penalty_advantages,
    kl_sample_train,
    masked_mean,
)

# Worked 2x3 batch shared by the KL-penalty tests.
#   d = (sample - ref) * mask = [[0, 0, -1], [0, 2, 0]]
#   dbar = sum(d) / sum(mask) = 1 / 4 = 0.25
#   k = 0.1 * mask * (dbar - d) = [[0, 0.025, 0.125], [0.025, -0.175, 0]]
SAMPLE = torch.tensor([[-1.0, -2.0, -3.0], [-1.0, -1.0, -1.0]])
REF = torch.tensor([[-1.5, -2.0, -2.0], [-1.0, -3.0, -1.0]])
MASK = torch.tensor([[0.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
ADV_B = torch.tensor([1.0, -1.0])


def test_kl_penalty_worked_example():
    adv, metrics = kl_penalty_advantages(ADV_B, SAMPLE, REF, MASK, coef=0.1)
    # A + k, masked: row 0 pos 0 and row 1 pos 2 are non-action tokens
    expected = [[0.0, 1.025, 1.125], [-0.975, -1.175, 0.0]]
    torch.testing.assert_close(adv, torch.tensor(expected))
    assert metrics == {"kl_policy_ref": pytest.approx(0.25)}


def test_kl_penalty_accepts_per_token_advantages():
    adv_BT = ADV_B.unsqueeze(1).expand(2, 3)
    a, _ = kl_penalty_advantages(adv_BT, SAMPLE, REF, MASK, coef=0.1)
    b, _ = kl_penalty_advantages(ADV_B, SAMPLE, REF, MASK, coef=0.1)
    assert torch.equal(a, b)


def test_kl_penalty_discounted():
    adv, _ = kl_penalty_advantages(ADV_B, SAMPLE, REF, MASK, coef=0.1, discount=0.5)
    # backward scan of k with 0.5:
    #   row 0: t2 = 0.125, t1 = 0.025 + 0.5*0.125 = 0.0875, t0 = 0.04375 (masked -> 0)
    #   row 1: t2 = 0, t1 = -0.175, t0 = 0.025 + 0.5*(-0.175) = -0.0625
    expected = [[0.0, 1.0875, 1.125], [-1.0625, -1.175, 0.0]]
    torch.testing.assert_close(adv, torch.tensor(expected))


def test_kl_penalty_empty_mask():
    adv, metrics = kl_penalty_advantages(ADV_B, SAMPLE, REF, torch.zeros(2, 3), coef=0.1)
    assert adv.tolist() == [[0.0] * 3] * 2
    assert metrics["kl_policy_ref"] == 0.0


def test_discounted_future_sum_edge_gammas():
    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    assert torch.equal(discounted_future_sum(x, 0.0), x)
    assert discounted_future_sum(x, 1.0).tolist() == [[6.0, 5.0, 3.0], [15.0, 11.0, 6.0]]
    assert discounted_future_sum(x, 0.5).tolist() == [[2.75, 3.5, 3.0], [8.0, 8.0, 6.0]]


def test_kl_sample_train_worked():
    sample = torch.tensor([[-1.0, -2.0], [-3.0, -4.0]])
    train = torch.tensor([[-1.5, -2.0], [-2.0, -9.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    # d over action tokens = [0.5, 0, -1]
    m = kl_sample_train(sample, train, mask)
    assert m["kl_sample_train_v1"] == pytest.approx(-0.5 / 3)
    assert m["kl_sample_train_v2"] == pytest.approx(0.5 * 1.25 / 3)
    assert kl_sample_train(sample, train, torch.zeros(2, 2)) == {
        "kl_sample_train_v1": 0.0,
        "kl_sample_train_v2": 0.0,
    }


def test_k3_kl_values_and_no_nan():
    pi = torch.tensor([0.0, -1.0, -1000.0, 0.0])
    ref = torch.tensor([0.0, -1.0 + 0.5, 0.0, -1000.0])
    k = k3_kl(pi, ref)
    assert torch.isfinite(k).all()
    assert k[0] == 0.0
    assert k[1].item() == pytest.approx(torch.exp(torch.tensor(0.5)).item() - 1.5)
    assert (k >= 0).all()


def test_masked_mean_and_entropy():
    x = torch.tensor([[1.0, float("nan")], [3.0, 5.0]])
    mask = torch.tensor([[1, 0], [1, 1]])
    assert masked_mean(x, mask).item() == pytest.approx(3.0)
    assert masked_mean(x, torch.zeros(2, 2)).item() == 0.0
    logp = torch.tensor([[-0.5, -9.0], [-1.5, -1.0]])
    assert entropy_from_logp(logp, mask).item() == pytest.approx(1.0)


def test_approx_kl_worked_numbers():
    """0.5 * mean over action tokens of the squared log-ratio: (0.5 * (0.04 + 0.16)) / 2 = 0.05; padding ignored."""
    from rlft.algos import approx_kl

    log_ratio_BT = torch.tensor([[0.2, -0.4, 9.0]])
    mask_BT = torch.tensor([[1.0, 1.0, 0.0]])
    assert float(approx_kl(log_ratio_BT, mask_BT)) == pytest.approx(0.05)
