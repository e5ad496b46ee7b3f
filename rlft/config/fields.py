"""The building blocks of the schema, shared by `rlft.config.schema` and the stage folders' own sections:
`F` (a field with its default, one-line help and allowed values) and the sub-sections several stages
use. Standard library only: a stage's `spec.py` imports this, never the assembled schema."""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field
from typing import Any, Optional


def F(default: Any = MISSING, help: str = "", *, ge=None, gt=None, le=None, lt=None,
      choices=None, factory=None, also=None) -> Any:
    """A schema field: default, one-line help and the allowed values in one place (`also`: words accepted
    besides the type, e.g. `auto` for a number)."""
    meta = {"help": help, "ge": ge, "gt": gt, "le": le, "lt": lt, "choices": choices, "also": also}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


# A config section's dataclass: only its __init__ is generated. Sections are shown and compared key by key
# (to_dict, render_yaml, the resume check), never by repr or ==, and each generated method is compiled at every start.
# (Every dataclass here has a docstring: without one, dataclass renders its whole signature into __doc__ at import.)
config_section = dataclass(repr=False, eq=False)


@config_section
class AsyncConfig:
    """`async:` off-policy sampling by a copy of the policy (GRPO, PPO)."""
    max_steps_off_policy: Optional[int] = F(None, "Async off-policy training: a sampler copy of the policy runs up to "
                                                  "this many training iterations (GRPO) or updates (PPO) ahead of the "
                                                  "learner, with weights at most that old; an older batch is dropped "
                                                  "(counted) and re-sampled. The loss corrects for the lag with the "
                                                  "sampler's log-probs (importance sampling; PPO clips against the "
                                                  "learner and weights by pi_learner / pi_sampler). Start below 5. "
                                                  "null = synchronous.", ge=1, le=64)


# The sampling keys every sampling stage's section has, one definition each.
def temperature_field(default: float, help: str = "Sampling temperature.") -> Any:
    return F(default, help, gt=0, le=5)


def top_p_field(default: float = 1.0) -> Any:
    return F(default, "Nucleus sampling threshold.", gt=0, le=1)


def max_tokens_field(default: int = 256) -> Any:
    return F(default, "Longest sampled completion in tokens.", ge=1)
