"""LoopState, what rlft's own loop carries between updates: the KL controller's arithmetic, the returns' scale, and
rlft_state.json in the format checkpoints had before it (so old checkpoints resume)."""

import pytest
import torch

from rlft.algos import AdaptiveKLController, LoopState, masked_moments


def test_adaptive_and_fixed_coefficients_step_as_the_controllers():
    state, ctl = LoopState.fresh(0.1, 6.0, True, 10.0), AdaptiveKLController(0.1, 6.0, 10.0)
    for kl in (1.0, 12.0, 6.5):
        state, _ = state.with_kl(kl, 1), ctl.update(kl, 1)
        assert state.kl_coef == ctl.value
    fixed = LoopState.fresh(0.2, 6.0, False, 10.0)
    assert fixed.with_kl(100.0) is fixed and fixed.kl_target is None
    with pytest.raises(ValueError):
        LoopState.fresh(0.1, None, True, 10.0)  # adaptive control needs a target


def test_returns_accumulate_and_scale_as_before():
    state = LoopState.fresh(0.0, None, False, 1.0)
    assert state.return_scale == 1.0  # no spread yet
    returns = torch.tensor([0.0, 10.0, -10.0, 4.0])
    state = state.with_returns(masked_moments(returns, torch.ones(4)))
    assert state.return_scale == pytest.approx(float(returns.double().std()))
    assert state.return_moments.dtype == torch.float64


def test_checkpoint_format_round_trips_and_old_files_load():
    state = LoopState.fresh(0.1, 6.0, True, 10.0).with_kl(12.0)
    state = state.with_returns(masked_moments(torch.tensor([1.0, 3.0]), torch.ones(2)))
    saved = state.state_dict()
    assert saved == {"kl_controller": {"value": state.kl_coef, "target": 6.0, "horizon": 10.0},
                     "trainer": {"eval_start": None, "return_moments": [4.0, 10.0, 2.0]}}
    back = LoopState.fresh(0.1, 6.0, True, 10.0).load(saved)
    assert back.kl_coef == state.kl_coef and torch.equal(back.return_moments, state.return_moments)
    # a checkpoint written before LoopState: the same keys, return_moments null and an eval start
    old = {"kl_controller": {"value": 0.3}, "trainer": {"eval_start": {"reward_mean": 1.0}, "return_moments": None}}
    loaded = LoopState.fresh(0.1, None, False, 10.0).load(old)
    assert loaded.kl_coef == 0.3 and loaded.eval_start == {"reward_mean": 1.0} and loaded.return_scale == 1.0
    with pytest.raises(TypeError):
        LoopState.fresh(0.1, None, False, 10.0).load({"kl_controller": "0.0"})  # refused, as a damaged file


def test_a_kl_setting_changed_on_resume_replaces_the_state():
    adaptive = LoopState.fresh(0.1, 6.0, True, 10.0)
    assert adaptive.with_kl_setting("target", 3.0).kl_target == 3.0
    assert adaptive.with_kl_setting("horizon", 50).kl_horizon == 50.0
    fixed = LoopState.fresh(0.1, None, False, 10.0)
    assert fixed.with_kl_setting("value", 0.5).kl_coef == 0.5
    assert fixed.with_kl_setting("target", 3.0) == fixed  # a fixed coefficient has no target


def test_each_estimator_is_one_registration_of_its_step_and_loss():
    from rlft.trainers.advantage_steps import ADVANTAGE_ESTIMATORS, advantage_step, critic_loss, gae_step

    assert ADVANTAGE_ESTIMATORS.names() == ("gae", "episode_returns")
    assert advantage_step("gae").fn is gae_step and advantage_step("gae").loss is critic_loss
    with pytest.raises(ValueError, match="did you mean 'gae'"):
        advantage_step("gea")
