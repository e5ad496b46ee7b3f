"""Checks of prompt data against what a sampling stage and its rewards need, run before a run
folder exists (and, for the light ones, by ``validate-config``): every prompt is text or chat
messages, every column a reward reads is in the data, and every prompt fits the sequence budget.

Only the length check needs a tokenizer; nothing here imports torch or ``datasets``.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlft.data.errors import DataError
from rlft.data.messages import value_kind

__all__ = ["TOO_LONG_MODES", "LengthReport", "check_prompt_values", "missing_reward_columns", "fit_prompts"]

TOO_LONG_MODES = ("truncate", "drop", "error")
# rows named in one error message; the rest are counted
_SHOWN_ROWS = 5


def _rows(rows: Sequence[int]) -> str:
    shown = ", ".join(map(str, rows[:_SHOWN_ROWS]))
    return shown + (f" and {len(rows) - _SHOWN_ROWS} more" if len(rows) > _SHOWN_ROWS else "")


def check_prompt_values(values: Iterable[Any], column: str, source: str) -> list[str]:
    """One message per kind of bad prompt (non-text, empty), naming the first rows (0-based)."""
    bad: dict[str, list[int]] = {}
    for i, value in enumerate(values):
        try:
            kind = value_kind(value)
        except TypeError as exc:
            bad.setdefault(str(exc), []).append(i)
            continue
        if kind == "empty":
            bad.setdefault("empty prompt", []).append(i)
    return [f"{source}: column {column!r}: {what} in row{'s' if len(rows) > 1 else ''} {_rows(rows)}"
            for what, rows in bad.items()]


def missing_reward_columns(columns: Iterable[str], needs: Mapping[str, Iterable[str]], source: str) -> list[str]:
    """Messages for each reward whose declared columns the data lacks; ``needs`` maps reward name ->
    columns still needed (configured kwargs already taken out)."""
    available = list(columns)
    problems = []
    for name, wanted in needs.items():
        for column in wanted:
            if column in available:
                continue
            close = difflib.get_close_matches(column, available, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            problems.append(f"{source}: reward {name!r} reads column {column!r}, which the data does not have "
                            f"(columns: {', '.join(available) or 'none'}){hint}")
    return problems


@dataclass
class LengthReport:
    """What :func:`fit_prompts` did: rows kept (indices), prompts rewritten, counts, the longest prompt."""

    keep: list[int]
    prompts: dict[int, Any] = field(default_factory=dict)  # row -> truncated prompt
    truncated: int = 0
    dropped: int = 0
    longest: int = 0
    budget: int = 0

    def message(self, source: str) -> str | None:
        if not (self.truncated or self.dropped):
            return None
        did = f"kept the last {self.budget} tokens of {self.truncated}" if self.truncated else f"dropped {self.dropped}"
        return (f"{source}: {self.truncated + self.dropped} prompt(s) longer than {self.budget} tokens "
                f"(longest {self.longest}): {did} (data.too_long)")


def fit_prompts(
    prompts: Sequence[Any],
    count: Callable[[Any], int],
    cut: Callable[[Any, int], Any],
    budget: int,
    mode: str,
    source: str,
    why: str = "",
) -> LengthReport:
    """Fit every prompt into ``budget`` tokens.

    ``count(prompt)`` is its length in tokens as the model will see it; ``cut(prompt, n)`` returns it
    with ``n`` tokens removed from the left (chat: from the earliest non-system messages). ``mode``:
    ``truncate`` keeps the last tokens, ``drop`` skips the row, ``error`` raises :class:`DataError`
    naming the rows. ``why`` explains the budget in errors.
    """
    if mode not in TOO_LONG_MODES:
        raise ValueError(f"data.too_long must be one of {', '.join(TOO_LONG_MODES)}, got {mode!r}")
    report = LengthReport(keep=[], budget=budget)
    too_long: list[tuple[int, int]] = []
    for i, prompt in enumerate(prompts):
        n = count(prompt)
        report.longest = max(report.longest, n)
        if n <= budget:
            report.keep.append(i)
            continue
        too_long.append((i, n))
        if mode == "drop":
            report.dropped += 1
            continue
        if mode == "truncate":
            fitted, length = prompt, n
            for _ in range(8):  # re-tokenised text can differ by a token or two: cut again
                fitted = cut(fitted, length - budget)
                length = count(fitted)
                if length <= budget:
                    break
            if length > budget:
                raise DataError(f"{source}: row {i}: the prompt cannot be cut to {budget} tokens "
                                f"(its fixed part, e.g. the system message, is {length} tokens){why}")
            report.prompts[i] = fitted
            report.truncated += 1
            report.keep.append(i)
    if mode == "error" and too_long:
        rows = [i for i, _ in too_long]
        longest = max(n for _, n in too_long)
        raise DataError(f"{source}: {len(rows)} prompt(s) longer than {budget} tokens (longest {longest}) in "
                        f"row{'s' if len(rows) > 1 else ''} {_rows(rows)}{why}; set data.too_long to truncate "
                        f"or drop, or raise train.max_seq_length")
    if not report.keep:
        raise DataError(f"{source}: every prompt is longer than {budget} tokens{why}; nothing left to train on")
    return report
