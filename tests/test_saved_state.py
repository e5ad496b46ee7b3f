"""The state a trainer keeps in its checkpoints' rlft_state.json, through the typed protocols of
rlft.runtime.saved_state (no attribute probing): what is written, what loads, what a resume refuses."""

from __future__ import annotations

from rlft.algos.kl_control import AdaptiveKLController, FixedKLController
from rlft.runtime.saved_state import (HasKLController, SavesRlftState, SavesTrainerState, load_rlft_state,
                                      rlft_state, state_problem)


class OwnState:  # GRPO's shape: its own part, and eval.start under "trainer"
    def __init__(self):
        self.kl_ctl, self.last_kl, self.eval_start = AdaptiveKLController(0.1, 0.05), None, None

    def rlft_state_dict(self):
        return {"kl_controller": self.kl_ctl.state_dict(), "last_kl": self.last_kl}

    def load_rlft_state_dict(self, state):
        if not isinstance(state.get("last_kl"), (float, type(None))):
            raise ValueError("last_kl is not a number")
        self.kl_ctl.load_state_dict(state["kl_controller"])
        self.last_kl = state["last_kl"]

    def rlft_extra_state(self):
        return {"eval_start": self.eval_start}

    def load_rlft_extra_state(self, state):
        self.eval_start = state.get("eval_start")


class ControllerOnly:  # PPO's shape: a KL controller, and eval.start under "trainer"
    def __init__(self):
        self.kl_ctl, self.eval_start = FixedKLController(0.2), None

    def rlft_extra_state(self):
        return {"eval_start": self.eval_start}

    def load_rlft_extra_state(self, state):
        self.eval_start = state.get("eval_start")


class Plain:  # DPO, ORPO, SFT: nothing of rlft's own
    pass


def test_protocols_describe_each_trainer():
    assert isinstance(OwnState(), SavesRlftState) and isinstance(OwnState(), SavesTrainerState)
    assert not isinstance(ControllerOnly(), SavesRlftState) and isinstance(ControllerOnly(), HasKLController)
    assert not any(isinstance(Plain(), p) for p in (SavesRlftState, SavesTrainerState, HasKLController))


def test_what_each_trainer_writes():
    assert rlft_state(OwnState()) == {"kl_controller": {"value": 0.1, "target": 0.05, "horizon": 10000.0},
                                      "last_kl": None, "trainer": {"eval_start": None}}
    assert rlft_state(ControllerOnly()) == {"kl_controller": {"value": 0.2}, "trainer": {"eval_start": None}}
    assert rlft_state(Plain()) == {}


def test_a_saved_state_loads_and_a_changed_kl_setting_wins():
    trainer = ControllerOnly()
    state = {"kl_controller": {"value": 0.5}, "trainer": {"eval_start": {"reward": 1.0}}}
    load_rlft_state(trainer, state, {}, "ppo")
    assert trainer.kl_ctl.value == 0.5 and trainer.eval_start == {"reward": 1.0}
    load_rlft_state(trainer, state, {"ppo.init_kl_coef": (0.2, 0.3), "ppo.target_kl": (1, 2)}, "ppo")
    assert trainer.kl_ctl.value == 0.3 and not hasattr(trainer.kl_ctl, "target")  # a fixed controller has none


def test_a_state_the_trainer_cannot_take_is_a_problem():
    trainer = OwnState()
    assert state_problem(trainer, {"kl_controller": {"value": 1.0}}, {}, "grpo") == \
        "rlft_state.json lacks last_kl, trainer"
    bad = {"kl_controller": {"value": 1.0}, "last_kl": "x", "trainer": {}}
    assert state_problem(trainer, bad, {},
                         "grpo") == "rlft_state.json does not load (ValueError: last_kl is not a number)"
    good = {"kl_controller": {"value": 1.0, "target": 0.1}, "last_kl": 0.25, "trainer": {"eval_start": None}}
    assert state_problem(trainer, good, {}, "grpo") is None and trainer.last_kl == 0.25 and trainer.kl_ctl.value == 1.0
