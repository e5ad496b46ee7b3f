"""Layered, strictly validated configuration (no heavy imports)."""

from rlft.config.compose import CLI_LAYER, Composed, compose, configs_dir
from rlft.config.errors import ConfigError, Problem
from rlft.config.schema import HARDWARE, STAGES, RlftConfig
from rlft.config.validate import validate


def load_config(stage: str, hw: str, files=(), overrides=(), *, for_train: bool = False):
    """Compose and validate in one call: returns (typed config, composed, warnings)."""
    composed = compose(stage, hw, files, overrides)
    cfg, warnings = validate(composed, for_train=for_train)
    return cfg, composed, warnings


__all__ = ["CLI_LAYER", "Composed", "ConfigError", "HARDWARE", "Problem", "RlftConfig", "STAGES",
           "compose", "configs_dir", "load_config", "validate"]
