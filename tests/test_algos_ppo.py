"""PPO math against hand-computed numbers."""

import math

import pytest
import torch

from rlft.algos import (
    clipped_surrogate, clipped_value_loss, entropy_from_logits, explained_variance, gae, gae_advantages,
    kl_penalty_per_token, last_token_index, masked_moments, masked_whiten, moments_mean_var, ppo_loss, shape_rewards,
    value_bias_from_returns,
)

T = torch.tensor


def test_gae_three_tokens_by_hand():
    # t=2: d=1-0.7=0.3, A=0.3; t=1: d=0.9*0.7-0.6=0.03, A=0.03+0.72*0.3=0.246;
    # t=0: d=0.9*0.6-0.5=0.04, A=0.04+0.72*0.246=0.21712
    adv, ret = gae(T([[0.0, 0.0, 1.0]]), T([[0.5, 0.6, 0.7]]), T([[1, 1, 1]]), gamma=0.9, lam=0.8)
    assert adv.tolist()[0] == pytest.approx([0.21712, 0.246, 0.3])
    assert ret.tolist()[0] == pytest.approx([0.71712, 0.846, 1.0])


def test_gae_skips_masked_tokens():
    # the middle token is an observation: its value and reward are ignored and the chain carries over it
    # t=2: A=0.3; t=0: d=0.9*0.7-0.5=0.13, A=0.13+0.72*0.3=0.346
    adv, ret = gae(T([[0.0, 5.0, 1.0]]), T([[0.5, 9.0, 0.7]]), T([[1, 0, 1]]), gamma=0.9, lam=0.8)
    assert adv.tolist()[0] == pytest.approx([0.346, 0.0, 0.3])
    assert ret.tolist()[0] == pytest.approx([0.846, 0.0, 1.0])
    # trailing padding: V after the last action token is 0
    adv, _ = gae(T([[0.0, 1.0, 0.0]]), T([[0.5, 0.6, 0.9]]), T([[1, 1, 0]]), gamma=0.9, lam=0.8)
    assert adv.tolist()[0] == pytest.approx([0.328, 0.4, 0.0])


def test_gae_gamma_lam_one_is_reward_to_go_minus_value():
    g = torch.Generator().manual_seed(0)
    r, v = torch.randn(3, 6, generator=g), torch.randn(3, 6, generator=g)
    mask = torch.ones(3, 6)
    adv, ret = gae(r, v, mask, gamma=1.0, lam=1.0)
    to_go = r.flip(1).cumsum(1).flip(1)
    assert torch.allclose(adv, to_go - v, atol=1e-6)
    assert torch.allclose(ret, to_go, atol=1e-6)


def test_gae_lam_zero_is_one_step_td():
    adv, _ = gae(T([[0.0, 1.0]]), T([[0.2, 0.4]]), T([[1, 1]]), gamma=0.5, lam=0.0)
    assert adv.tolist()[0] == pytest.approx([0.5 * 0.4 - 0.2, 1.0 - 0.4])


def test_masked_whiten():
    x, mask = T([[1.0, 2.0, 3.0, 100.0]]), T([[1, 1, 1, 0]])
    w = masked_whiten(x, mask)  # mean 2, Bessel variance 1
    assert w.tolist()[0] == pytest.approx([-1.0, 0.0, 1.0, 0.0], abs=1e-6)
    assert masked_whiten(x, mask, shift_mean=False).tolist()[0] == pytest.approx([1.0, 2.0, 3.0, 0.0], abs=1e-6)


def test_shape_rewards_puts_score_on_last_action_token():
    kl = T([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]])
    mask = T([[1, 1, 0], [1, 1, 1]])
    assert last_token_index(mask).tolist() == [1, 2]
    r = shape_rewards(T([2.0, 1.0]), kl, mask, kl_coef=0.5)
    assert r.tolist()[0] == pytest.approx([-0.05, 1.9, 0.0])
    assert r.tolist()[1] == pytest.approx([-0.2, -0.25, 0.7])
    # an unscored episode (NaN) gets the KL part only
    r = shape_rewards(T([float("nan")]), T([[0.1, 0.1]]), T([[1, 1]]), kl_coef=1.0)
    assert r.tolist()[0] == pytest.approx([-0.1, -0.1])


def test_kl_estimators():
    lp, ref = T([[-1.0, -2.0]]), T([[-1.5, -1.5]])
    assert kl_penalty_per_token(lp, ref, "kl").tolist()[0] == pytest.approx([0.5, -0.5])
    assert kl_penalty_per_token(lp, ref, "abs").tolist()[0] == pytest.approx([0.5, 0.5])
    assert kl_penalty_per_token(lp, ref, "mse").tolist()[0] == pytest.approx([0.125, 0.125])
    full_p = torch.log(T([[[0.5, 0.5]]]))
    full_ref = torch.log(T([[[0.25, 0.75]]]))
    kl = kl_penalty_per_token(lp[:, :1], ref[:, :1], "full", full_p, full_ref)
    assert kl.item() == pytest.approx(0.5 * math.log(2) + 0.5 * math.log(0.5 / 0.75))
    with pytest.raises(ValueError, match="full"):
        kl_penalty_per_token(lp, ref, "full")
    with pytest.raises(ValueError, match="allowed"):
        kl_penalty_per_token(lp, ref, "k9")


def test_clipped_surrogate_by_hand():
    # r=1.5,A=1 -> max(-1.5,-1.2)=-1.2 (clipped); r=0.5,A=-1 -> max(0.5,0.8)=0.8 (clipped); r=1,A=2 -> -2
    logp = torch.log(T([[1.5, 0.5, 1.0]]))
    loss, m = clipped_surrogate(logp, torch.zeros(1, 3), T([[1.0, -1.0, 2.0]]), torch.ones(1, 3), 0.2)
    assert loss.item() == pytest.approx((-1.2 + 0.8 - 2.0) / 3)
    assert m["clipfrac"] == pytest.approx(2 / 3)
    assert m["approx_kl"] == pytest.approx((0.5 * math.log(1.5) ** 2 + 0.5 * math.log(0.5) ** 2) / 3)


def test_clipped_value_loss_by_hand():
    # V_clip = [0.7, 0.3]; (V-G)^2 = [1, 0]; (Vc-G)^2 = [1.69, 0.09]; 0.5 * mean(max) = 0.445
    loss, m = clipped_value_loss(T([[1.0, 0.0]]), T([[0.5, 0.5]]), T([[2.0, 0.0]]), torch.ones(1, 2), 0.2)
    assert loss.item() == pytest.approx(0.445)
    assert m["value_clipfrac"] == 1.0


def test_entropy_and_explained_variance():
    assert entropy_from_logits(torch.zeros(1, 1, 4)).item() == pytest.approx(math.log(4))
    g = T([[1.0, 2.0, 3.0]])
    mask = torch.ones(1, 3)
    assert explained_variance(g, g, mask) == pytest.approx(1.0)
    assert explained_variance(torch.full_like(g, 2.0), g, mask) == pytest.approx(0.0)


def _toy_policy(seed=0):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(5, 7, generator=g).requires_grad_(True)
    x = torch.randn(2, 3, 5, generator=g)
    tokens = torch.randint(0, 7, (2, 3), generator=g)
    adv = torch.randn(2, 3, generator=g)
    mask = T([[1, 1, 1], [1, 1, 0]])

    def logp_and_logits():
        logits = x @ w
        return torch.log_softmax(logits, -1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1), logits
    return w, logp_and_logits, adv, mask


def test_first_ppo_step_equals_policy_gradient():
    """ppo_epochs=1, one minibatch: the ratio is 1, the clip never acts, and the gradient is that of
    the plain policy-gradient loss -mean(A * log pi)."""
    w, fwd, adv, mask = _toy_policy()
    logp, _ = fwd()
    loss, m = clipped_surrogate(logp, logp.detach(), adv, mask, 0.2)
    (g_ppo,) = torch.autograd.grad(loss, w)
    logp, _ = fwd()
    pg = -(adv * logp * mask).sum() / mask.sum()
    (g_pg,) = torch.autograd.grad(pg, w)
    assert torch.allclose(g_ppo, g_pg, atol=1e-7)
    assert m["clipfrac"] == 0.0


def test_loss_with_zero_coefs_is_the_clipped_surrogate():
    w, fwd, adv, mask = _toy_policy(1)
    logp, logits = fwd()
    old = (logp + 0.3 * torch.randn_like(logp)).detach()  # some tokens clipped
    values = torch.randn(2, 3, requires_grad=True)
    total, m = ppo_loss(logp, old, adv, values, values.detach() + 1, torch.randn(2, 3),
                        entropy_from_logits(logits), mask, clip_range=0.2, clip_range_value=0.2, vf_coef=0.0,
                        ent_coef=0.0)
    (g_total,) = torch.autograd.grad(total, w, retain_graph=True)
    surrogate, _ = clipped_surrogate(logp, old, adv, mask, 0.2)
    (g_surr,) = torch.autograd.grad(surrogate, w)
    assert total.item() == pytest.approx(surrogate.item())
    assert torch.allclose(g_total, g_surr)
    assert m["policy_loss"] == pytest.approx(surrogate.item())


def test_behaviour_weights_worked_numbers():
    import math

    from rlft.algos import behaviour_weights

    prox = torch.tensor([[math.log(0.5), math.log(0.9), math.log(0.2)]])
    behav = torch.tensor([[math.log(0.25), math.log(0.9), math.log(0.01)]])
    mask = torch.tensor([[1.0, 1.0, 1.0]])
    w = behaviour_weights(prox, behav, mask)
    assert torch.allclose(w, torch.tensor([[2.0, 1.0, 5.0]]))  # 0.2 / 0.01 = 20, truncated at 5
    assert torch.allclose(behaviour_weights(prox, behav, mask, cap=None)[0, 2], torch.tensor(20.0))
    assert behaviour_weights(prox, behav, torch.tensor([[1.0, 0.0, 1.0]]))[0, 1] == 0
    same = behaviour_weights(prox, prox, mask)
    assert torch.equal(same, torch.ones_like(same))  # on-policy: exactly 1


def test_a_huge_log_ratio_gives_a_finite_loss_and_gradient():
    """exp(100) is inf in float32; the log-ratio is clamped to +-20 first, as verl does."""
    from rlft.algos.policy_loss import LOG_RATIO_CLAMP, importance_sampling

    for fn in (clipped_surrogate, importance_sampling):
        logp = torch.tensor([[100.0, -100.0, 0.0]], requires_grad=True)
        loss, m = fn(logp, torch.zeros(1, 3), T([[1.0, -1.0, 1.0]]), torch.ones(1, 3), 0.2)
        loss.backward()
        assert torch.isfinite(loss) and torch.isfinite(logp.grad).all() and math.isfinite(m["ratio"])
    assert math.exp(LOG_RATIO_CLAMP) < torch.finfo(torch.float32).max


def test_dual_clip_caps_a_negative_advantage_at_minus_a_c():
    # r = e^2 = 7.39 with A = -1: the clipped surrogate gives max(7.39, 1.2) = 7.39; dual-clip c = 3 caps it at 3
    logp, old, adv, mask = T([[2.0, 2.0]]), torch.zeros(1, 2), T([[-1.0, 1.0]]), torch.ones(1, 2)
    plain, _ = clipped_surrogate(logp, old, adv, mask, 0.2)
    dual, m = clipped_surrogate(logp, old, adv, mask, 0.2, clip_ratio_c=3.0)
    # positive advantage: max(-r, -1.2) = -1.2 either way
    assert abs(float(plain) - (math.exp(2) - 1.2) / 2) < 1e-5
    assert abs(float(dual) - (3.0 - 1.2) / 2) < 1e-5 and m["clipfrac_lower"] == 0.5
    same, m2 = clipped_surrogate(T([[0.1, 0.1]]), old, adv, mask, 0.2, clip_ratio_c=3.0)
    ref, _ = clipped_surrogate(T([[0.1, 0.1]]), old, adv, mask, 0.2)
    assert float(same) == float(ref) and m2["clipfrac_lower"] == 0.0  # inside the cap nothing changes


def test_masked_moments_and_their_mean_and_variance():
    x, mask = T([[1.0, 2.0, 3.0, float("nan")]]), T([[1, 1, 1, 0]])
    mom = masked_moments(x, mask)
    assert mom.dtype == torch.float64 and mom.tolist() == [6.0, 14.0, 3.0]  # sum, sum of squares, count
    mean, var = moments_mean_var(mom)
    assert float(mean) == 2.0 and float(var) == pytest.approx(1.0)  # (14 - 6 * 2) / (3 - 1), as masked_var
    assert float(moments_mean_var(mom, unbiased=False)[1]) == pytest.approx(2 / 3)
    assert [float(v) for v in moments_mean_var(masked_moments(T([[5.0]]), T([[1]])))] == [5.0, 0.0]  # one element
    assert [float(v) for v in moments_mean_var(masked_moments(T([[5.0]]), T([[0]])))] == [0.0, 0.0]  # none


def test_masked_whiten_over_summed_moments_is_the_whole_batch_whitened():
    # two processes' batches: {1, 2} and {3, 6} -> sum 12, squares 50, count 4: mean 3, variance (50 - 36) / 3
    a, mask_a = T([[1.0, 2.0, 9.0]]), T([[1, 1, 0]])
    b, mask_b = T([[3.0, 6.0, -9.0]]), T([[1, 1, 0]])
    total = masked_moments(a, mask_a) + masked_moments(b, mask_b)
    assert total.tolist() == [12.0, 50.0, 4.0]
    sd = math.sqrt(14 / 3)
    wa, wb = masked_whiten(a, mask_a, moments=total), masked_whiten(b, mask_b, moments=total)
    assert wa.tolist()[0] == pytest.approx([-2 / sd, -1 / sd, 0.0], abs=1e-6)
    assert wb.tolist()[0] == pytest.approx([0.0, 3 / sd, 0.0], abs=1e-6)
    whole = masked_whiten(torch.cat([a, b]), torch.cat([mask_a, mask_b]))
    assert torch.allclose(torch.cat([wa, wb]), whole, atol=1e-6)
    # shift_mean=False puts the global mean back
    assert masked_whiten(a, mask_a, shift_mean=False, moments=total).tolist()[0] == \
        pytest.approx([3 - 2 / sd, 3 - 1 / sd, 0.0], abs=1e-6)


def test_gae_estimator_whitens_over_all_processes_when_given_their_sum():
    rewards = T([[0.0, 1.0, 0.5], [0.0, 2.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 3.0]])
    values = T([[0.1, 0.2, 0.0], [0.3, 0.1, 0.0], [0.5, 0.0, 0.0], [0.2, 0.4, 0.6]])
    mask = T([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1]])
    gae_adv = gae_advantages
    kw = dict(gamma=0.9, lam=0.8)
    whole, ret = gae_adv(rewards_BT=rewards, values_BT=values, mask_BT=mask, **kw)
    halves = [slice(0, 2), slice(2, 4)]
    raw = [gae(rewards[h], values[h], mask[h], 0.9, 0.8)[0] for h in halves]
    total = sum(masked_moments(r, mask[h]) for r, h in zip(raw, halves))  # what an all-reduce over 2 ranks gives
    split = [gae_adv(rewards_BT=rewards[h], values_BT=values[h], mask_BT=mask[h], sum_over_processes=lambda t: total,
                     **kw)[0] for h in halves]
    assert torch.allclose(torch.cat(split), whole, atol=1e-6)
    # each half whitened on its own (what a process did before) differs from the global whitening
    local = [gae_adv(rewards_BT=rewards[h], values_BT=values[h], mask_BT=mask[h], **kw)[0] for h in halves]
    assert not torch.allclose(torch.cat(local), whole, atol=1e-3)
    # one process: the sum over processes is the batch's own moments; the same numbers as without it
    own, _ = gae_adv(rewards_BT=rewards, values_BT=values, mask_BT=mask, sum_over_processes=lambda t: t, **kw)
    assert torch.allclose(own, whole, atol=1e-6) and torch.equal(ret, gae(rewards, values, mask, 0.9, 0.8)[1])


def test_return_scale_only_shrinks_worked_numbers():
    from rlft.algos import masked_moments, return_scale

    returns = torch.tensor([-20.0, 18.0, -2.0, 4.0])  # mean 0, unbiased variance (400 + 324 + 4 + 16) / 3 = 248
    ones = torch.ones(4)
    assert return_scale(masked_moments(returns, ones)) == pytest.approx(248 ** 0.5)
    assert return_scale(masked_moments(torch.tensor([0.0, 1.0, 1.0, 0.0]), ones)) == 1.0  # spread under 1: as is
    assert return_scale(masked_moments(torch.tensor([5.0]), torch.ones(1))) == 1.0  # one return: no spread yet
    # the moments of two batches add up to those of their union
    both = masked_moments(returns[:2], ones[:2]) + masked_moments(returns[2:], ones[2:])
    assert return_scale(both) == pytest.approx(248 ** 0.5)


def test_value_bias_is_the_mean_discounted_return_per_action_token():
    """gamma 0.5. Row 0: rewards 0, 0, 2 -> returns-to-go 0.5, 1, 2. Row 1: 1, (masked), 4 -> 3 (the masked token
    skipped), 4. Mean over the five action tokens: 10.5 / 5 = 2.1."""
    rewards = T([[0.0, 0.0, 2.0], [1.0, 9.0, 4.0]])
    mask = T([[1.0, 1.0, 1.0], [1.0, 0.0, 1.0]])
    assert value_bias_from_returns(rewards, mask, 0.5) == pytest.approx(2.1)
    # gamma 1, every episode the same score on its last token: every target is that score
    same = T([[0.0, 0.0, 17.5], [0.0, 17.5, 0.0]])
    assert value_bias_from_returns(same, T([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]]), 1.0) == pytest.approx(17.5)


def test_a_warmup_loss_is_the_value_term_alone():
    torch.manual_seed(0)
    logp, logp_old, adv = torch.randn(2, 3), torch.randn(2, 3), torch.randn(2, 3)
    v, v_old, ret, ent = torch.randn(2, 3), torch.randn(2, 3), torch.randn(2, 3), torch.rand(2, 3)
    mask = torch.ones(2, 3)
    kw = dict(clip_range=0.2, clip_range_value=0.2, vf_coef=0.5, ent_coef=0.01)
    full, m_full = ppo_loss(logp, logp_old, adv, v, v_old, ret, ent, mask, **kw)
    warm, m_warm = ppo_loss(logp, logp_old, adv, v, v_old, ret, ent, mask, train_policy=False, **kw)
    assert float(warm) == pytest.approx(0.5 * m_full["value_loss"])
    assert m_warm == m_full  # the policy terms are still reported
    assert float(full) != pytest.approx(float(warm))


def test_advantage_norms_worked_numbers():
    from rlft.algos import normalize_gae_advantages

    adv, mask = T([[1.0, 2.0, 6.0, 9.0]]), T([[1, 1, 1, 0]])  # mean 3, deviations -2, -1, 3, variance 14 / 2 = 7
    sd = math.sqrt(7)
    assert normalize_gae_advantages(adv, mask, "whiten").tolist()[0] == pytest.approx([-2 / sd, -1 / sd, 3 / sd, 0.0])
    assert torch.equal(normalize_gae_advantages(adv, mask, "whiten"), masked_whiten(adv, mask))  # today's numbers
    assert normalize_gae_advantages(adv, mask, "center").tolist()[0] == [-2.0, -1.0, 3.0, 0.0]
    assert normalize_gae_advantages(adv, mask, "none").tolist()[0] == [1.0, 2.0, 6.0, 0.0]
    # several processes: center subtracts the global batch's mean ({1, 2, 6} and {3, 8}: 20 / 5 = 4)
    total = masked_moments(adv, mask) + masked_moments(T([[3.0, 8.0]]), T([[1, 1]]))
    assert normalize_gae_advantages(adv, mask, "center", total).tolist()[0] == [-3.0, -2.0, 2.0, 0.0]
    with pytest.raises(ValueError, match="whiten, center, none"):
        normalize_gae_advantages(adv, mask, "scale")


def test_gae_estimator_advantage_norm_none_and_center():
    from rlft.algos import masked_mean

    rewards = T([[0.0, 1.0, 0.5], [0.0, 2.0, 0.0]])
    values = T([[0.1, 0.2, 0.0], [0.3, 0.1, 0.0]])
    mask = T([[1, 1, 1], [1, 1, 0]])
    raw, ret = gae(rewards, values, mask, 0.9, 0.8)
    gae_adv = gae_advantages
    kw = dict(rewards_BT=rewards, values_BT=values, mask_BT=mask, gamma=0.9, lam=0.8)
    none, ret_none = gae_adv(norm="none", **kw)
    assert torch.equal(none, raw) and torch.equal(ret_none, ret)  # the returns never change with the norm
    centred, _ = gae_adv(norm="center", **kw)
    assert torch.allclose(centred, (raw - masked_mean(raw, mask)) * mask)
    assert abs(float(masked_mean(centred, mask))) < 1e-6
    assert torch.equal(gae_adv(**kw)[0], gae_adv(norm="whiten", **kw)[0])  # whiten is the default
    calls = []
    gae_adv(norm="none", sum_over_processes=lambda t: calls.append(t) or t, **kw)
    assert not calls  # no moments to gather for raw advantages
