"""Column checks and renames shared by the dataset preparation steps.

TRL trainers look for fixed column names (``prompt``, ``chosen``,
``rejected``); configs may name them differently. These helpers map one to
the other with errors that list what the dataset does have.
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Any

from rlft.data.errors import DataError

if TYPE_CHECKING:
    from datasets import Dataset

__all__ = ["require_columns", "rename_columns", "column_values"]


def require_columns(ds: Dataset, wanted: dict[str, str], source: str) -> None:
    """Fail with every missing column at once; ``wanted`` maps role -> configured name."""
    available = list(ds.column_names)
    missing = [(role, name) for role, name in wanted.items() if name not in available]
    if not missing:
        return
    parts = []
    for role, name in missing:
        close = difflib.get_close_matches(name, available, n=1)
        hint = f", did you mean {close[0]!r}?" if close else ""
        parts.append(f"{role} column {name!r} not found{hint}")
    raise DataError(f"{source}: {'; '.join(parts)} (columns: {', '.join(available) or 'none'})")


def rename_columns(ds: Dataset, mapping: dict[str, str], source: str) -> Dataset:
    """Rename configured names to the trainer's (``mapping``: configured -> target).

    Refuses to overwrite an unrelated column that already has a target name,
    which would silently train on the wrong text.
    """
    renames = {old: new for old, new in mapping.items() if old != new}
    sources = set(renames)
    for old, new in renames.items():
        if new in ds.column_names and new not in sources:
            raise DataError(
                f"{source}: cannot use column {old!r} as {new!r}: the dataset already has a {new!r} column; "
                f"rename or drop one of them"
            )
    return ds.rename_columns(renames) if renames else ds


def column_values(ds: Dataset, name: str) -> list[Any]:
    """A column as plain Python values, whatever output format the dataset has."""
    return list(ds.with_format(None)[name])
