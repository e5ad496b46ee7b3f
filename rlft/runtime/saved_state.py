"""The state rlft keeps in each checkpoint's rlft_state.json beyond what transformers saves, and how a trainer
takes part: the typed protocols below (a trainer implements what it has), never probed attribute by attribute."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from rlft.runtime.checkpoint_files import RLFT_STATE


@runtime_checkable
class SavesRlftState(Protocol):
    """A trainer that writes its own part of rlft_state.json (GRPO: the KL controller and the KL measured since
    its last update); `load_rlft_state_dict` raises TypeError/ValueError/KeyError on a state it cannot take."""

    def rlft_state_dict(self) -> dict: ...

    def load_rlft_state_dict(self, state: dict) -> None: ...


@runtime_checkable
class SavesTrainerState(Protocol):
    """A trainer whose own resumable values (e.g. eval.start) ride under the state's "trainer" key."""

    def rlft_extra_state(self) -> dict: ...

    def load_rlft_extra_state(self, state: dict) -> None: ...


class KLController(Protocol):
    value: float

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


@runtime_checkable
class HasKLController(Protocol):
    """A trainer with a KL coefficient controller (`rlft.algos.kl_control`); a trainer that is not SavesRlftState
    keeps its controller's state under "kl_controller"."""

    kl_ctl: KLController


@runtime_checkable
class HasLoopState(Protocol):
    """A trainer on rlft's own loop: its state between updates is one value (`rlft.algos.loop_state.LoopState`),
    written whole through `SavesRlftState`; a KL setting changed on --resume replaces it."""

    loop_state: Any


def _kl_controller(trainer) -> KLController | None:
    return trainer.kl_ctl if isinstance(trainer, HasKLController) else None


def rlft_state(trainer) -> dict:
    """What rlft adds to each of `trainer`'s checkpoints."""
    if isinstance(trainer, SavesRlftState):
        state = dict(trainer.rlft_state_dict())
    else:
        kl_ctl = _kl_controller(trainer)
        state = {"kl_controller": kl_ctl.state_dict()} if kl_ctl is not None else {}
    if isinstance(trainer, SavesTrainerState):
        state["trainer"] = trainer.rlft_extra_state()
    return state


def load_rlft_state(trainer, state: dict, changes: dict, section: str) -> None:
    """A checkpoint's rlft state into `trainer`; then a KL setting changed by --allow-config-change (`changes`:
    {key: (old, new)}, the stage's section named `section`) wins over the controller state it held."""
    if not state:
        return
    if isinstance(trainer, SavesRlftState):
        trainer.load_rlft_state_dict(state)
    elif (kl_ctl := _kl_controller(trainer)) is not None and "kl_controller" in state:
        kl_ctl.load_state_dict(state["kl_controller"])
    if isinstance(trainer, SavesTrainerState) and "trainer" in state:
        trainer.load_rlft_extra_state(state["trainer"])
    kl_ctl = _kl_controller(trainer)
    looping = isinstance(trainer, HasLoopState)
    if kl_ctl is None and not looping:
        return
    for key, attr in (("kl_penalty_coef", "value"), ("init_kl_coef", "value"), ("target_kl", "target"),
                      ("kl_horizon", "horizon")):
        new = changes.get(f"{section}.{key}", (None, None))[1]
        if new is None:  # a horizon set back to null keeps the one the run resolved
            continue
        if looping:
            trainer.loop_state = trainer.loop_state.with_kl_setting(attr, float(new))
        elif hasattr(kl_ctl, attr):  # a fixed controller has no target
            setattr(kl_ctl, attr, float(new))


def state_problem(trainer, state: dict, changes: dict, section: str) -> str | None:
    """Load a resumed checkpoint's rlft `state` into `trainer`; why it cannot be (a key this trainer writes is
    missing, or a value its loader refuses), or None."""
    missing = [k for k in rlft_state(trainer) if k not in state]
    if missing:
        return f"{RLFT_STATE} lacks {', '.join(missing)}"
    try:
        load_rlft_state(trainer, state, changes, section)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        return f"{RLFT_STATE} does not load ({type(exc).__name__}: {exc})"
    return None
