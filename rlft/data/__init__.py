"""Data loading and checks for rlft.

Only the light helpers are imported eagerly: ``rlft validate-config`` checks
columns with :func:`peek_columns` and must not pay for importing
``datasets``. The loaders are resolved on first attribute access.
"""

from __future__ import annotations

from typing import Any

from rlft.data.errors import DataError
from rlft.data.peek import TableInfo, check_columns, peek_columns

__all__ = [
    "DataError",
    "TableInfo",
    "check_columns",
    "peek_columns",
    "load_table",
    "prepare_prompt_dataset",
    "prepare_preference_dataset",
]

# attributes served lazily from rlft.data.load
_LAZY = {"load_table", "prepare_prompt_dataset", "prepare_preference_dataset"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from rlft.data import load

        return getattr(load, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
