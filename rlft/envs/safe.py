"""Calling a user environment safely: each `reset`/`step` runs in a worker thread with a deadline, and
exceptions, timeouts and malformed returns become a *fault* (the episode ends with `failure_reward`,
counted) instead of a crashed run. Same design as `rlft.rewards.safe.SafeReward`: a hung call is
abandoned (daemon thread), never joined."""

from __future__ import annotations

import logging
import math
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rlft.rewards.safe import RewardFailureError

logger = logging.getLogger("rlft.envs")
_POLL_S = 0.05

__all__ = ["EnvFailureError", "EnvGuard", "SafeEnv", "SafeEnvFactory", "Step", "as_messages", "reward_parts"]


class EnvFailureError(RewardFailureError):
    """Too many episodes ended by env faults: the run is learning from a broken environment (exit 4,
    like too many unscored completions)."""


class EnvGuard:
    """Stops the run when more than `max_fraction` of the episodes so far ended in an env fault
    (checked once `min_episodes` have run, as the reward failure guard)."""

    def __init__(self, name: str, max_fraction: float = 0.5, min_episodes: int = 32,
                 should_abort: Callable[[], bool] = lambda: False):
        self.name, self.max_fraction, self.min_episodes = name, max_fraction, min_episodes
        self.should_abort = should_abort
        self.seen = self.failed = 0
        self.last_fault: str | None = None

    def stopping(self) -> bool:
        """Whether the run is being stopped (the abort check the run set, read at each call)."""
        return self.should_abort()

    def record(self, seen: int, failed: int, last_fault: str | None = None) -> None:
        self.seen += seen
        self.failed += failed
        self.last_fault = last_fault or self.last_fault
        if self.should_abort() or self.seen < self.min_episodes or self.failed <= self.max_fraction * self.seen:
            return
        raise EnvFailureError(
            f"env {self.name!r} faulted in {self.failed} of {self.seen} episodes ({self.failed / self.seen:.0%}), "
            f"above monitor.max_reward_failure_fraction={self.max_fraction}; last fault: {self.last_fault}. "
            f"Check the environment's reset/step and env.step_timeout_s.")


@dataclass
class Step:
    """One env step as the episode loop sees it."""
    observation: list[dict] = field(default_factory=list)
    reward: float = 0.0
    components: dict[str, float] = field(default_factory=dict)
    done: bool = False
    info: dict = field(default_factory=dict)
    fault: str | None = None  # "raised: ...", "timeout", "bad return: ..." (then done is True)


def as_messages(obs: Any, role: str = "tool") -> list[dict]:
    """An observation as chat messages: None -> [], str -> one `role` message, dict -> [dict]."""
    if obs is None:
        return []
    if isinstance(obs, str):
        return [{"role": role, "content": obs}]
    if isinstance(obs, dict):
        obs = [obs]
    if isinstance(obs, (list, tuple)) and all(isinstance(m, dict) and "role" in m and "content" in m for m in obs):
        return [dict(m) for m in obs]
    raise TypeError(f"observation must be a string, a message dict or a list of them, got {type(obs).__name__}")


def reward_parts(reward: Any) -> tuple[float, dict[str, float]]:
    """(total, components) of a float or a {name: float} reward; raises on anything else or non-finite."""
    if isinstance(reward, dict):
        parts = {str(k): float(v) for k, v in reward.items()}
    elif isinstance(reward, (int, float)) and not isinstance(reward, bool):
        parts = {}
        total = float(reward)
        if not math.isfinite(total):
            raise ValueError(f"reward is {total}")
        return total, parts
    else:
        raise TypeError(f"reward must be a number or a dict of numbers, got {type(reward).__name__}")
    bad = [k for k, v in parts.items() if not math.isfinite(v)]
    if bad:
        raise ValueError(f"reward components {bad} are not finite")
    return sum(parts.values()), parts


class SafeEnv:
    """One environment instance behind a deadline. `name` is what messages call it (env.name)."""

    def __init__(self, env: Any, name: str, timeout_s: float | None = 30.0, failure_reward: float = -5.0,
                 should_abort: Callable[[], bool] = lambda: False):
        self.env, self.name, self.timeout_s = env, name, timeout_s
        self.failure_reward = failure_reward
        self.should_abort = should_abort
        self.faults = 0
        self._logged: set[str] = set()
        self._abandoned: list[threading.Thread] = []

    def _call(self, fn: Callable, *args) -> tuple[str, Any]:
        if self.timeout_s is None:
            try:
                return "ok", fn(*args)
            except BaseException as exc:  # noqa: BLE001 - sys.exit() in env code must not end the run
                if isinstance(exc, KeyboardInterrupt) and self.should_abort():
                    raise
                return "raised", exc
        box: dict[str, Any] = {}
        done = threading.Event()

        def work() -> None:
            try:
                box["value"] = fn(*args)
            except BaseException as exc:  # noqa: BLE001
                box["exc"] = exc
            finally:
                done.set()

        worker = threading.Thread(target=work, name=f"rlft-env-{self.name}", daemon=True)
        worker.start()
        deadline = time.monotonic() + self.timeout_s
        while not done.wait(_POLL_S):
            if self.should_abort() or time.monotonic() >= deadline:
                self._abandoned.append(worker)
                return ("aborted" if self.should_abort() else "timeout"), None
        return ("raised", box["exc"]) if "exc" in box else ("ok", box.get("value"))

    def _fault(self, what: str, detail: str, exc: BaseException | None = None) -> Step:
        self.faults += 1
        kind = detail.split(":", 1)[0]
        if kind not in self._logged:
            self._logged.add(kind)
            where = ""
            if exc is not None and exc.__traceback__ is not None:  # one line naming the env's code, no traceback
                frame = traceback.extract_tb(exc.__traceback__)[-1]
                where = f" (at {frame.filename}:{frame.lineno})"
            logger.warning("env %r %s: %s%s; the episode ends with failure_reward %s. Further faults of this kind "
                           "are counted, not logged.", self.name, what, detail, where, self.failure_reward)
        return Step(reward=self.failure_reward, components={"env_failure": self.failure_reward}, done=True,
                    fault=detail)

    def reset(self, row: dict, seed: int) -> tuple[list[dict] | None, str | None]:
        """(opening messages, None) or (None, fault description)."""
        status, value = self._call(self.env.reset, row, seed)
        if status != "ok":
            detail = "timeout" if status != "raised" else f"raised: {type(value).__name__}: {value}"
            self._fault("reset", detail, value if status == "raised" else None)
            return None, detail
        try:
            msgs = as_messages(value, role="user")
            if not msgs:
                raise ValueError("reset returned no messages")
        except (TypeError, ValueError) as exc:
            detail = f"bad return: {exc}"
            self._fault("reset", detail)
            return None, detail
        return msgs, None

    def step(self, action_text: str) -> Step:
        status, value = self._call(self.env.step, action_text)
        if status == "timeout":
            return self._fault("step", f"timeout: step ran past env.step_timeout_s ({self.timeout_s} s)")
        if status == "aborted":
            return self._fault("step", "aborted: the run is stopping")
        if status == "raised":
            return self._fault("step", f"raised: {type(value).__name__}: {value}", value)
        try:
            if not isinstance(value, (tuple, list)) or len(value) != 4:
                raise TypeError("step must return (observation, reward, done, info)")
            obs, reward, done, info = value
            total, parts = reward_parts(reward)
            return Step(observation=as_messages(obs), reward=total, components=parts, done=bool(done),
                        info=dict(info or {}))
        except (TypeError, ValueError) as exc:
            return self._fault("step", f"bad return: {exc}")


@dataclass(frozen=True)
class SafeEnvFactory:
    """A fresh SafeEnv around a new `cls(**kwargs)` per call (one per episode). Its abort check is the guard's,
    read at each call, so Ctrl-C never waits on a hung step once the run has set the guard's check."""
    cls: type
    kwargs: dict
    name: str
    timeout_s: float | None
    failure_reward: float
    guard: EnvGuard

    def __call__(self) -> SafeEnv:
        return SafeEnv(self.cls(**self.kwargs), self.name, timeout_s=self.timeout_s,
                       failure_reward=self.failure_reward, should_abort=self.guard.stopping)
