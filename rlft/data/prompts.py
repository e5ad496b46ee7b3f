"""Turn a loaded table into a prompt dataset for online RL (GRPO, PPO, ...).

The prompt column is renamed to ``prompt`` and every other column is kept,
because reward functions receive them (reference answers, targets).
Problems are caught here, before a trainer spends minutes loading a model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlft.data.columns import column_values, rename_columns, require_columns
from rlft.data.errors import DataError
from rlft.data.messages import value_kind

if TYPE_CHECKING:
    from datasets import Dataset

__all__ = ["prepare_prompt_dataset"]


def _check_prompts(values: list[Any], column: str, source: str) -> str:
    """Validate every prompt; return the dataset's kind ('text' or 'chat').

    Row numbers in errors are 0-based, as in ``ds[i]``.
    """
    kinds = set()
    for i, value in enumerate(values):
        try:
            kind = value_kind(value)
        except TypeError as exc:
            raise DataError(f"{source}: row {i}: column {column!r}: {exc}") from exc
        if kind == "empty":
            raise DataError(f"{source}: row {i}: prompt in column {column!r} is empty")
        kinds.add(kind)
    if len(kinds) > 1:
        raise DataError(f"{source}: column {column!r} mixes plain text and chat messages")
    return kinds.pop()


def _with_system(messages: list[dict[str, Any]], system_prompt: str) -> list[dict[str, Any]]:
    """Prepend the system message unless the row already brings its own."""
    if messages and messages[0].get("role") == "system":
        return messages
    return [{"role": "system", "content": system_prompt}, *messages]


def prepare_prompt_dataset(
    ds: Dataset,
    prompt_column: str = "prompt",
    *,
    system_prompt: str | None = None,
    source: str = "data.train",
) -> Dataset:
    """Rename ``prompt_column`` to ``prompt``, validate it, and apply ``system_prompt``.

    Prompts may be text or chat message lists. With ``system_prompt``, text
    prompts become ``[system, user]`` messages and chat prompts without a
    system message get one prepended. ``source`` (the config key, optionally
    with the file) prefixes every error.
    """
    if len(ds) == 0:
        raise DataError(f"{source}: dataset is empty")
    require_columns(ds, {"prompt": prompt_column}, source)
    kind = _check_prompts(column_values(ds, prompt_column), prompt_column, source)
    ds = rename_columns(ds, {prompt_column: "prompt"}, source)
    if not system_prompt:
        return ds
    if kind == "text":
        convert = lambda p: [{"role": "system", "content": system_prompt}, {"role": "user", "content": p}]  # noqa: E731
    else:
        convert = lambda p: _with_system(p, system_prompt)  # noqa: E731
    return ds.map(lambda row: {"prompt": convert(row["prompt"])}, desc="Adding system prompt")
