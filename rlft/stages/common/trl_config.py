"""Building a TRL trainer config from rlft's arguments, with TRL's objections turned into rlft config
errors: the key the user set (or the rlft key that maps onto TRL's option) and its layer, exit 2."""

from __future__ import annotations

import re

from rlft.config.compose import Composed
from rlft.config.errors import ConfigError, Problem
from rlft.config.schema import RlftConfig
from rlft.config.trl_fields import modeled_by_rlft


def rlft_keys_in(message: str, args: dict, cfg: RlftConfig) -> list[str]:
    """The rlft keys behind the TRL options a TRL error message names: `trl.X` for passthrough
    options first (the likeliest culprit), then the rlft keys mapped onto TRL's options."""
    modeled = modeled_by_rlft(cfg.stage)
    named = [k for k in sorted(args, key=len, reverse=True) if re.search(rf"(?<![\w.]){re.escape(k)}(?!\w)", message)]
    passthrough = [f"trl.{k}" for k in named if k in cfg.trl]
    mapped = [modeled[k] for k in named if k not in cfg.trl and k in modeled]
    return list(dict.fromkeys(passthrough + mapped))


def build_trl_config(config_cls, args: dict, cfg: RlftConfig, composed: Composed | None = None):
    """`config_cls(**args)`; a ValueError/TypeError from TRL becomes a ConfigError naming the key."""
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
