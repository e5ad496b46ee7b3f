"""KL coefficient controllers (Ziegler et al. 2019, "Fine-Tuning Language
Models from Human Preferences").

The adaptive controller nudges the KL coefficient so the measured KL tracks a
target: too much drift from the reference raises the penalty, too little
lowers it. The per-update change is clipped so one noisy KL estimate cannot
swing the coefficient.

Horizon: rlft counts it in training steps (GRPO optimizer steps, PPO updates) and updates once per sampled
batch with n_steps = the steps trained since the last update. Left unset, it is a tenth of the run's steps,
so a KL error of 20% or more moves the coefficient by up to e^2 (about 7x) over the run, the run it is
used in; Ziegler's fixed 10,000 episodes barely moves it in a short run (0.1 -> 0.09997 over 30 steps).

Unit: rlft measures ``current_kl`` as the mean over the batch's action tokens of the per-token
KL estimate (nats per token), in PPO and GRPO alike; ``target_kl`` is in the same unit (0.1 per
token is the staged guide's value; old TRL's target of 6 was a per-sequence sum).
"""

from __future__ import annotations

import math

from rlft.config.kl_horizon import HORIZON_FRACTION, default_horizon  # noqa: F401 - the config's rule, re-exported


def adaptive_kl_update(
    coef: float, current_kl: float, target_kl: float, n_steps: int, horizon: float
) -> float:
    """One proportional-controller step: coef * (1 + clip(kl/target - 1, ±0.2) * n_steps/horizon)."""
    proportional_error = min(max(current_kl / target_kl - 1.0, -0.2), 0.2)
    return coef * (1.0 + proportional_error * n_steps / horizon)


def steps_to_reach(ratio: float, horizon: float) -> float:
    """Steps the controller needs to scale the coefficient by `ratio` (> 0) at full error (±20%)."""

    per_step = 1.0 + (0.2 if ratio >= 1 else -0.2) / horizon
    return math.log(ratio) / math.log(per_step)


class FixedKLController:
    """Constant KL coefficient; ``update`` is a no-op so callers need not branch."""

    def __init__(self, coef: float):
        self.value = float(coef)

    def update(self, current_kl: float, n_steps: int) -> None:
        pass

    def state_dict(self) -> dict:
        return {"value": self.value}

    def load_state_dict(self, state: dict) -> None:
        self.value = float(state["value"])


class AdaptiveKLController:
    """Adaptive KL coefficient steering measured KL toward ``target_kl``."""

    def __init__(self, init_kl_coef: float, target_kl: float, horizon: float = 10000):
        if target_kl <= 0:
            raise ValueError(f"target_kl must be > 0, got {target_kl}")
        self.value = float(init_kl_coef)
        self.target = float(target_kl)
        self.horizon = float(horizon)

    def update(self, current_kl: float, n_steps: int) -> None:
        self.value = adaptive_kl_update(
            self.value, float(current_kl), self.target, n_steps, self.horizon
        )

    def state_dict(self) -> dict:
        return {"value": self.value, "target": self.target, "horizon": self.horizon}

    def load_state_dict(self, state: dict) -> None:
        self.value = float(state["value"])
        self.target = float(state.get("target", self.target))
        self.horizon = float(state.get("horizon", self.horizon))


def make_kl_controller(
    init_kl_coef: float,
    target_kl: float | None = None,
    adaptive: bool = False,
    horizon: float = 10000,
) -> FixedKLController | AdaptiveKLController:
    """Build the controller a config asks for; adaptive control requires ``target_kl``."""
    if not adaptive:
        return FixedKLController(init_kl_coef)
    if target_kl is None:
        raise ValueError("adaptive KL control requires target_kl")
    return AdaptiveKLController(init_kl_coef, target_kl, horizon)
