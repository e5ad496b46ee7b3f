"""A `trl:` value TRL declares no range for (`top_k: -1`) passes validate-config and is refused by the library
only where it is first used, inside the first training step. That error, when it names a `trl:` key the config
set, becomes one line naming the key and the layer that set it (exit 2) instead of a traceback."""

from __future__ import annotations

from rlft.config.compose import Composed
from rlft.config.trl_fields import keys_named_in
from rlft.errors import RunError


def trl_value_error(exc: BaseException, trl: dict, composed: Composed | None) -> RunError | None:
    """The RunError for `exc` (a ValueError or TypeError raised before this process's first step ended) when its
    message names one of the `trl:` passthrough keys, else None (not a passthrough value: the traceback stays)."""
    text = " ".join(str(exc).split())
    named = keys_named_in(text, trl or {})
    if not named:
        return None
    key = f"trl.{named[0]}"
    layer = composed.layer_of(key) if composed is not None else "config"
    also = f" (also names {', '.join('trl.' + k for k in named[1:])})" if named[1:] else ""
    return RunError(f"{key} ({layer}): refused at the first training step{also}: {text[:500]}", 2)
