"""Turn a loaded table into a preference dataset (DPO, ORPO, ...).

Preference data scraped or generated at scale routinely contains pairs
with an empty side or with chosen == rejected. Those pairs carry no
preference signal (and identical ones produce zero-gradient noise), so they
are dropped and reported, or rejected outright in strict mode. Format
mismatches are always errors: TRL cannot mix text and chat within a pair.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from rlft.data.columns import column_values, rename_columns, require_columns
from rlft.data.errors import DataError
from rlft.data.messages import normalized, value_kind

if TYPE_CHECKING:
    from datasets import Dataset

__all__ = ["prepare_preference_dataset"]

# how many offending row numbers reports and errors show
_MAX_ROWS_SHOWN = 5


def _kind(value: Any, column: str, row: int, source: str) -> str:
    """Kind of one cell, as a DataError naming column and row when malformed."""
    try:
        return value_kind(value)
    except TypeError as exc:
        raise DataError(f"{source}: row {row}: column {column!r}: {exc}") from exc


def _skip_reason(row: int, values: dict[str, Any], names: dict[str, str], source: str) -> str | None:
    """Why a row carries no preference signal, or None when it is usable."""
    kinds = {role: _kind(values[role], names[role], row, source) for role in ("prompt", "chosen", "rejected")}
    present = {role: k for role, k in kinds.items() if k != "empty"}
    if len(set(present.values())) > 1:
        detail = ", ".join(f"{names[r]!r} is {'chat messages' if k == 'chat' else 'text'}" for r, k in present.items())
        raise DataError(f"{source}: row {row}: prompt, chosen and rejected must share one format ({detail})")
    for role in ("prompt", "chosen", "rejected"):
        if kinds[role] == "empty":
            return f"empty {role}"
    if normalized(values["chosen"]) == normalized(values["rejected"]):
        return "identical chosen and rejected"
    return None


def prepare_preference_dataset(
    ds: Dataset,
    prompt_column: str = "prompt",
    chosen_column: str = "chosen",
    rejected_column: str = "rejected",
    *,
    strict: bool = False,
    source: str = "data.train",
) -> tuple[Dataset, dict[str, Any]]:
    """Validate, clean and rename a preference dataset to ``prompt``/``chosen``/``rejected``.

    Returns the dataset and a report ``{"total", "kept", "skipped",
    "first_rows", "reasons"}``; ``first_rows`` holds up to five 0-based row
    numbers of skipped rows and ``reasons`` counts one reason per skipped
    row. With ``strict`` any skipped row is a :class:`DataError` instead.
    """
    if len(ds) == 0:
        raise DataError(f"{source}: dataset is empty")
    names = {"prompt": prompt_column, "chosen": chosen_column, "rejected": rejected_column}
    require_columns(ds, names, source)
    columns = {role: column_values(ds, name) for role, name in names.items()}
    skipped: list[int] = []
    reasons: Counter[str] = Counter()
    for row in range(len(ds)):
        reason = _skip_reason(row, {role: columns[role][row] for role in names}, names, source)
        if reason is not None:
            skipped.append(row)
            reasons[reason] += 1
    report = {
        "total": len(ds),
        "kept": len(ds) - len(skipped),
        "skipped": len(skipped),
        "first_rows": skipped[:_MAX_ROWS_SHOWN],
        "reasons": dict(reasons),
    }
    if skipped:
        shown = ", ".join(map(str, report["first_rows"])) + (", ..." if len(skipped) > _MAX_ROWS_SHOWN else "")
        why = ", ".join(f"{reason}: {n}" for reason, n in reasons.items())
        summary = f"{len(skipped)} of {len(ds)} rows have no usable preference pair ({why}); first rows: {shown}"
        if strict:
            raise DataError(f"{source}: {summary}. Fix them, or disable strict checking to drop them")
        if len(skipped) == len(ds):
            raise DataError(f"{source}: no usable rows: {summary}")
        drop = set(skipped)
        ds = ds.select([i for i in range(len(ds)) if i not in drop])
    ds = rename_columns(ds, {v: k for k, v in names.items()}, source)
    return ds, report
