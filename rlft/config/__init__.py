"""Layered, strictly validated configuration (no heavy imports).

The names below are loaded on first use, so `rlft --help` (which needs only the stage and hardware
names) does not build the schema or load YAML."""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

from rlft.lazy import lazy_attributes

if TYPE_CHECKING:
    from rlft.config.compose import CLI_LAYER, Composed, compose, configs_dir
    from rlft.config.errors import ConfigError, Problem
    from rlft.config.schema import RlftConfig
    from rlft.config.stages import HARDWARE, STAGES
    from rlft.config.validate import validate

_WHERE = {
    "CLI_LAYER": "compose", "Composed": "compose", "compose": "compose", "configs_dir": "compose",
    "ConfigError": "errors", "Problem": "errors",
    "RlftConfig": "schema",
    "HARDWARE": "stages", "STAGES": "stages",
    "validate": "validate",
}


__getattr__ = lazy_attributes(__name__, _WHERE)


class _Package(types.ModuleType):
    """`rlft.config.compose` and `rlft.config.validate` stay the functions once their modules of the same
    name load (importing a submodule sets the package attribute to the module otherwise)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("compose", "validate") and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def load_config(stage: str, hw: str, files=(), overrides=(), *, for_train: bool = False):
    """Compose and validate in one call: returns (typed config, composed, warnings)."""
    from rlft.config.compose import compose
    from rlft.config.validate import validate

    composed = compose(stage, hw, files, overrides)
    cfg, warnings = validate(composed, for_train=for_train)
    return cfg, composed, warnings


__all__ = ["CLI_LAYER", "Composed", "ConfigError", "HARDWARE", "Problem", "RlftConfig", "STAGES",
           "compose", "configs_dir", "load_config", "validate"]
