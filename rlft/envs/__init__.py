"""Environments for multi-turn episodes (tool use, agents).

The contract a user environment follows (a class named by `env.name`, built with `env.kwargs`)::

    class MyEnv:
        tools: list[dict] | None = None   # JSON tool schemas, passed to the chat template as tools=
        def reset(self, row: dict, seed: int) -> list[dict]:
            # the opening conversation for one dataset row: [{"role": "system"|"user", "content": ...}, ...]
        def step(self, action_text: str) -> tuple[observation, reward, done, info]:
            # observation: a message dict, a list of them, a string (a `tool` message) or None
            # reward: a float, or {component name: float} (logged one by one, summed)
            # done: True ends the episode; info: a dict (`success`: bool is read for the success rate)

Before `reset` the episode loop sets `env.max_episode_length` (the turn cap), so an env may score its
last allowed turn. One instance serves one episode at a time. Faults (an exception, a `step` past
`env.step_timeout_s`, a malformed return) end that episode with `env.failure_reward` and are counted.

This package imports no torch: `validate-config` checks `env.name` through `rlft.config.env_spec` (no user code runs).
"""

from rlft.envs.registry import BUILTIN_ENVS, EnvResolveError, check_env_spec, resolve_env_class
from rlft.envs import toolsim  # noqa: F401 - its built-ins register on import (here, so the registry imports no env)

__all__ = ["BUILTIN_ENVS", "EnvResolveError", "check_env_spec", "resolve_env_class"]
