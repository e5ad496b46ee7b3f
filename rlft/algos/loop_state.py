"""What rlft's own RL loop (PPO, GRPO over episodes) carries from one update to the next, as one value: the KL
coefficient and its controller's settings, the episode returns' running moments (their scale divides every
reward), and eval.start. The loop replaces it after each update; a checkpoint keeps it whole in rlft_state.json."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch
from torch import Tensor

from rlft.algos.kl_control import adaptive_kl_update, make_kl_controller
from rlft.algos.ppo import return_scale

__all__ = ["LoopState"]


@dataclass(frozen=True)
class LoopState:
    kl_coef: float                      # the KL penalty's coefficient now
    kl_target: float | None = None      # the adaptive controller's target KL; None = a fixed coefficient
    kl_horizon: float | None = None     # the adaptive controller's horizon, in updates
    # episode returns so far, every process: (sum, sum of squares, count) in float64
    return_moments: Tensor = field(default_factory=lambda: torch.zeros(3, dtype=torch.float64))
    eval_start: dict | None = None      # summary.json's eval.start, kept for --resume

    @classmethod
    def fresh(cls, coef: float, target_kl: float | None, adaptive: bool, horizon: float) -> LoopState:
        """A run's first state (the controller's checks: adaptive control needs a positive target)."""
        ctl = make_kl_controller(coef, target_kl, adaptive, horizon)
        return cls(ctl.value, getattr(ctl, "target", None), getattr(ctl, "horizon", None))

    @property
    def return_scale(self) -> float:
        """The divisor of every reward (ppo.scale_returns): the returns' standard deviation, at least 1."""
        return return_scale(self.return_moments)

    def with_kl(self, kl: float, n_steps: int = 1) -> LoopState:
        """After an update that measured `kl`: the adaptive coefficient's step (a fixed one stays)."""
        if self.kl_target is None:
            return self
        return dataclasses.replace(self, kl_coef=adaptive_kl_update(self.kl_coef, float(kl), self.kl_target,
                                                                    n_steps, self.kl_horizon))

    def with_returns(self, batch_moments: Tensor) -> LoopState:
        """This batch's episode-return moments (summed over processes) added to the run's."""
        return dataclasses.replace(self, return_moments=self.return_moments + batch_moments.cpu())

    def with_kl_setting(self, attr: str, value: float) -> LoopState:
        """A KL setting changed on --resume (`value`, `target` or `horizon`); a fixed coefficient has no target or
        horizon to change."""
        if attr == "value":
            return dataclasses.replace(self, kl_coef=float(value))
        if self.kl_target is None:
            return self
        return dataclasses.replace(self, **{f"kl_{attr}": float(value)})

    # rlft_state.json: the KL controller's state_dict and the trainer's part, as before LoopState
    def state_dict(self) -> dict:
        kl = {"value": self.kl_coef}
        if self.kl_target is not None:
            kl.update(target=self.kl_target, horizon=self.kl_horizon)
        return {"kl_controller": kl,
                "trainer": {"eval_start": self.eval_start, "return_moments": self.return_moments.tolist()}}

    def load(self, state: dict) -> LoopState:
        """This state with a checkpoint's (`state_dict`'s) values; keys it lacks keep theirs, but eval.start,
        which a checkpoint without one had not measured."""
        out = self
        kl = state.get("kl_controller")
        if kl is not None:
            out = dataclasses.replace(out, kl_coef=float(kl["value"]))
            if out.kl_target is not None:
                out = dataclasses.replace(out, kl_target=float(kl.get("target", out.kl_target)),
                                          kl_horizon=float(kl.get("horizon", out.kl_horizon)))
        trainer = state.get("trainer")
        if trainer is not None:
            if trainer.get("return_moments") is not None:  # a resumed run scales its returns as the uninterrupted one
                out = dataclasses.replace(out, return_moments=torch.tensor(trainer["return_moments"],
                                                                           dtype=torch.float64))
            out = dataclasses.replace(out, eval_start=trainer.get("eval_start"))
        return out
