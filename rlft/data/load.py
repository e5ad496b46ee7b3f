"""Load a data file into a ``datasets.Dataset``.

``datasets`` is imported inside the functions so that importing this module
stays cheap; loading never touches the network. Low-level failures are
re-diagnosed with the light reader in :mod:`rlft.data.peek`, which names the
file and, for JSON Lines, the broken line.

The prompt and preference preparation steps are re-exported here so the
whole "file to trainer-ready dataset" path can be imported from one place.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlft.data.errors import DataError
from rlft.data.peek import check_data_path, json_layout, peek_columns
from rlft.data.preference import prepare_preference_dataset
from rlft.data.prompts import prepare_prompt_dataset

if TYPE_CHECKING:
    from datasets import Dataset

__all__ = ["load_table", "prepare_prompt_dataset", "prepare_preference_dataset"]


def _explain(exc: BaseException) -> str:
    """``Type: message`` of the deepest cause; ``datasets`` wraps the useful one."""
    root = exc
    while root.__cause__ is not None or root.__context__ is not None:
        root = root.__cause__ or root.__context__
    text = f"{type(exc).__name__}: {exc}"
    if root is not exc:
        text += f" (caused by {type(root).__name__}: {root})"
    return text


def _load(path: Path, kind: str) -> Any:
    """Dispatch to the ``datasets`` reader for ``kind``."""
    import datasets

    if kind == "folder":
        # in memory, writable or not: a memory-mapped table makes later maps (rlft's, TRL's) write their
        # cache files next to it, into the user's data folder; prompt and preference sets are small
        return datasets.load_from_disk(str(path), keep_in_memory=True)
    if kind == "json":
        field = "data" if json_layout(path) == "data" else None
        return datasets.load_dataset("json", data_files=str(path), field=field, split="train")
    builder = {"jsonl": "json", "csv": "csv", "parquet": "parquet"}[kind]
    return datasets.load_dataset(builder, data_files=str(path), split="train")


def load_table(path: str | Path) -> Dataset:
    """Load ``.jsonl``, ``.json``, ``.csv``, ``.parquet`` or a ``save_to_disk`` folder.

    A saved ``DatasetDict`` yields its ``train`` split. Every failure is a
    :class:`DataError` naming the path.
    """
    kind = check_data_path(path)
    # local files need no hub access; do not let a lookup stall offline machines
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    p = Path(path)
    if kind in ("json", "jsonl"):
        # a repeated key or a row nested too deep, named by line: datasets would keep one value silently
        peek_columns(p, n_rows=0)
    try:
        obj = _load(p, kind)
    except DataError:
        raise
    except Exception as exc:
        # the light reader gives precise messages (line numbers) when it sees the problem
        info = peek_columns(p)
        if info.num_rows == 0:
            raise DataError(f"{path} has no rows (columns: {', '.join(info.columns) or 'none'})") from exc
        raise DataError(f"could not load {path}: {_explain(exc)}") from exc
    # a DatasetDict is a dict of splits
    if isinstance(obj, dict):
        splits = list(obj.keys())
        if "train" not in splits:
            listing = ", ".join(splits) or "none"
            raise DataError(f"{path} holds a DatasetDict without a 'train' split (splits: {listing})")
        obj = obj["train"]
    return obj
