"""Building a TRL trainer config from rlft's arguments, with TRL's objections turned into rlft config
errors: the key the user set (or the rlft key that maps onto TRL's option) and its layer, exit 2."""

from __future__ import annotations

from rlft.config.compose import Composed
from rlft.config.errors import ConfigError, Problem
from rlft.config.schema import RlftConfig
from rlft.config.trl_fields import rlft_keys_in


def build_trl_config(config_cls, cfg: RlftConfig, output_dir: str, stage_args: dict, composed: Composed | None = None):
    """`config_cls(**args)`: the arguments every trainer shares (rlft.models.hardware) under the stage's own
    `stage_args` (its `trl:` passthrough last); a ValueError/TypeError from TRL becomes a ConfigError naming the key."""
    from rlft.models.hardware import common_training_args

    args = common_training_args(cfg, output_dir)
    args.update(stage_args)
    try:
        return config_cls(**args)
    except (ValueError, TypeError) as exc:
        text = " ".join(str(exc).split())
        if "eval" in text.lower() and args.get("eval_strategy", "no") == "no":
            text += " (rlft evaluates only when data.eval is set)"
        keys = rlft_keys_in(str(exc), args, cfg) or (["trl"] if cfg.trl else ["(training settings)"])
        first, others = keys[0], keys[1:]
        lookup = first.replace("[].weight", "")  # `rewards[].weight` is set where `rewards` is
        layer = composed.layer_of(lookup) if composed is not None else "config"
        also = f" (also involves {', '.join(others)})" if others else ""
        raise ConfigError([Problem(first, layer, f"TRL's {config_cls.__name__} rejected the settings{also}: "
                                                 f"{text}")]) from None
