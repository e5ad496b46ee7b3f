"""Whether a value read from a file or a config is a number, by one rule everywhere: true/false is no number (bool
is an int in Python, not in JSON or YAML), and NaN or ±inf is a number but not a finite one."""

from __future__ import annotations

import math
from typing import Any


def is_number(x: Any) -> bool:
    """An int or float, not a bool (NaN and ±inf included)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def is_finite(x: Any) -> bool:
    """A number (:func:`is_number`) that is neither NaN nor ±inf."""
    return is_number(x) and math.isfinite(x)
