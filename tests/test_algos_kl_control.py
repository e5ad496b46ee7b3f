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
