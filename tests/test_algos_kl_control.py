import json

import pytest

from rlft.algos import (
    AdaptiveKLController,
    FixedKLController,
    adaptive_kl_update,
    make_kl_controller,
)


def test_adaptive_above_target_clipped():
    # error = 0.2/0.1 - 1 = 1 -> clipped to 0.2; mult = 1 + 0.2 * 1000/10000 = 1.02
    ctl = AdaptiveKLController(0.05, target_kl=0.1, horizon=10000)
    ctl.update(0.2, n_steps=1000)
    assert ctl.value == pytest.approx(0.051)


def test_adaptive_below_target_decreases():
    # error = 0.09/0.1 - 1 = -0.1 (inside clip); mult = 1 - 0.1 * 0.1 = 0.99
    assert adaptive_kl_update(0.05, 0.09, 0.1, 1000, 10000) == pytest.approx(0.0495)
    # far below target clips at -0.2
    assert adaptive_kl_update(0.05, 0.0, 0.1, 1000, 10000) == pytest.approx(0.049)


def test_fixed_controller_is_constant():
    ctl = FixedKLController(0.04)
    ctl.update(10.0, 1000)
    assert ctl.value == 0.04


def test_state_dict_round_trip():
    ctl = AdaptiveKLController(0.05, 0.1, horizon=5000)
    ctl.update(0.3, 256)
    state = json.loads(json.dumps(ctl.state_dict()))
    fresh = AdaptiveKLController(1.0, 1.0)
    fresh.load_state_dict(state)
    assert fresh.state_dict() == ctl.state_dict()
    fixed = FixedKLController(0.1)
    fixed.load_state_dict(json.loads(json.dumps({"value": 0.3})))
    assert fixed.value == 0.3


def test_make_kl_controller():
    assert isinstance(make_kl_controller(0.1), FixedKLController)
    ctl = make_kl_controller(0.1, target_kl=6.0, adaptive=True, horizon=100)
    assert isinstance(ctl, AdaptiveKLController) and ctl.horizon == 100
    with pytest.raises(ValueError, match="target_kl"):
        make_kl_controller(0.1, adaptive=True)


def test_default_horizon_is_a_tenth_of_the_run():
    from rlft.algos.kl_control import default_horizon

    assert default_horizon(30) == 3 and default_horizon(1) == 1 and default_horizon(1000) == 100


def test_the_controller_steers_kl_to_its_target_within_the_run():
    """A synthetic policy whose KL falls as the coefficient rises (kl = k / coef): from twice the target,
    the default horizon brings it within 10% of the target before the run ends."""
    from rlft.algos.kl_control import AdaptiveKLController, default_horizon, steps_to_reach

    total, target, k = 60, 0.1, 0.002  # equilibrium coefficient k / target = 0.02
    ctl = AdaptiveKLController(0.01, target, default_horizon(total))
    assert steps_to_reach(2.0, ctl.horizon) < total  # doubling the coefficient fits in the run
    kls = []
    for _ in range(total):
        kl = k / ctl.value
        kls.append(kl)
        ctl.update(kl, n_steps=1)
    assert kls[0] == 0.2 and abs(kls[-1] - target) / target < 0.1
    # the fixed 10,000 horizon of old moves it by well under 1% in the same run
    old = AdaptiveKLController(0.01, target, 10000)
    for _ in range(total):
        old.update(k / old.value, n_steps=1)
    assert old.value < 0.0102
