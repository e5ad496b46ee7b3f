"""Built-in reward functions.

Every function follows the TRL reward API,
``fn(prompts, completions, **kwargs) -> list[float]``, so the same callable
works inside rlft and when handed straight to a TRL trainer. ``kwargs`` holds
the dataset's extra columns (one value per completion) merged with the
options configured in YAML (configured options win on a name clash). The
options that make sense per row (``pattern``, ``target``, ``char``) may also
come from a dataset column of the same name, which gives per-row settings
for free.

They are pure Python on purpose: the CLI resolves rewards while validating a
config and must not pay for importing torch.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any

__all__ = [
    "regex_match",
    "format_match",
    "exact_match",
    "numeric_match",
    "json_valid",
    "length_penalty",
    "overlong_penalty",
    "char_fraction",
    "completion_text",
    "soft_overlong",
]

# the answer block reasoning datasets conventionally ask for
DEFAULT_FORMAT_PATTERN = r"(?s)<answer>.*?</answer>"

# integers, thousands separators, decimals, leading-dot decimals, exponents
_NUMBER_RE = re.compile(
    r"[-+]?(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
)

# a ```json fenced block, the language tag optional
_FENCE_RE = re.compile(r"^```[ \t]*(?:json)?[ \t]*\n?(.*?)\n?```$", re.DOTALL | re.IGNORECASE)

# cap on substring parse attempts so a pathological completion stays cheap
_MAX_JSON_CANDIDATES = 64


def completion_text(completion: Any) -> str:
    """Return the text of one completion.

    TRL hands conversational completions over as message lists; rewards
    score the text, so take the last message's content.
    """
    if completion is None:
        return ""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return str(completion.get("content") or "")
    if isinstance(completion, Sequence):
        return completion_text(completion[-1]) if completion else ""
    return str(completion)


def _per_row(value: Any, n: int) -> list[Any]:
    """Broadcast a configured option to one value per completion.

    A list of length ``n`` is taken as a dataset column (per-row values);
    anything else is a constant from the config.
    """
    if isinstance(value, (list, tuple)) and len(value) == n:
        return list(value)
    return [value] * n


def _column(kwargs: dict[str, Any], column: str, n: int, fn_name: str) -> list[Any]:
    """Fetch a dataset column, failing with the columns that do exist."""
    if column not in kwargs:
        present = sorted(k for k, v in kwargs.items() if isinstance(v, (list, tuple)) and len(v) == n)
        raise KeyError(
            f"{fn_name}: dataset has no column {column!r} "
            f"(columns passed to rewards: {', '.join(present) or 'none'}); "
            f"set the reward's kwargs.column"
        )
    return _per_row(kwargs[column], n)


def _parse_flags(flags: Any) -> int:
    """Accept flags as an int, a name ("IGNORECASE"), or names joined by '|'."""
    if flags is None or flags == "":
        return 0
    if isinstance(flags, int):
        return flags
    names = flags if isinstance(flags, (list, tuple)) else str(flags).split("|")
    value = 0
    for name in names:
        name = str(name).strip().upper()
        flag = getattr(re, name, None)
        if not isinstance(flag, re.RegexFlag):
            raise ValueError(f"unknown regex flag {name!r}")
        value |= flag
    return value


def _matches(text: str, pattern: str, flags: Any, fullmatch: bool) -> bool:
    """Search (or fully match) one text; shared by the regex-based rewards."""
    compiled = re.compile(pattern, _parse_flags(flags))
    if fullmatch:
        return compiled.fullmatch(text.strip()) is not None
    return compiled.search(text) is not None


def regex_match(
    prompts: list[Any],
    completions: list[Any],
    pattern: str | list[str] | None = None,
    flags: Any = None,
    fullmatch: bool = False,
    **kwargs: Any,
) -> list[float]:
    """1.0 where the completion matches ``pattern`` (searched, or matched in
    full against the stripped text with ``fullmatch``), else 0.0."""
    if pattern is None:
        raise ValueError("regex_match needs a 'pattern' kwarg")
    patterns = _per_row(pattern, len(completions))
    return [
        1.0 if _matches(completion_text(c), str(p), flags, bool(fullmatch)) else 0.0
        for c, p in zip(completions, patterns)
    ]


def format_match(
    prompts: list[Any],
    completions: list[Any],
    pattern: str | list[str] = DEFAULT_FORMAT_PATTERN,
    flags: Any = None,
    fullmatch: bool = False,
    **kwargs: Any,
) -> list[float]:
    """:func:`regex_match` with a default pattern for the ``<answer>...</answer>``
    block, so the common format reward needs no configuration."""
    return regex_match(prompts, completions, pattern=pattern, flags=flags, fullmatch=fullmatch)


def _extract(text: str, extract: str | None) -> str | None:
    """Apply an optional extraction regex; group 1 if it has one, else the match."""
    if not extract:
        return text
    match = re.search(extract, text, re.DOTALL)
    if match is None:
        return None
    return match.group(1) if match.re.groups else match.group(0)


def exact_match(
    prompts: list[Any],
    completions: list[Any],
    column: str = "answer",
    extract: str | None = None,
    ignore_case: bool = False,
    **kwargs: Any,
) -> list[float]:
    """1.0 where the stripped completion (or its ``extract`` group) equals the
    stripped reference in ``column``; 0.0 when extraction finds nothing."""
    n = len(completions)
    answers = _column(kwargs, column, n, "exact_match")
    scores = []
    for c, ans in zip(completions, answers):
        pred = _extract(completion_text(c), extract)
        if pred is None or ans is None:
            scores.append(0.0)
            continue
        a, b = pred.strip(), str(ans).strip()
        if ignore_case:
            a, b = a.casefold(), b.casefold()
        scores.append(1.0 if a == b else 0.0)
    return scores


def _last_number(text: str) -> float | None:
    """The last number written in ``text`` (commas as thousands separators)."""
    found = _NUMBER_RE.findall(text)
    if not found:
        return None
    try:
        return float(found[-1].replace(",", ""))
    except ValueError:
        return None


def _reference_number(ans: Any, column: str, row: int) -> float:
    """Read a reference answer; strings like '#### 42' yield their last number."""
    if isinstance(ans, bool):
        return float(ans)
    if isinstance(ans, (int, float)):
        value = float(ans)
    else:
        value = _last_number(str(ans)) if ans is not None else None
    if value is None or not math.isfinite(value):
        raise ValueError(f"numeric_match: reference in column {column!r} row {row} is not a number: {ans!r}")
    return value


def numeric_match(
    prompts: list[Any],
    completions: list[Any],
    column: str = "answer",
    tol: float = 1e-6,
    partial: float = 0.5,
    **kwargs: Any,
) -> list[float]:
    """Score the last number in the completion against ``column``.

    1.0 within relative tolerance ``tol``; otherwise partial credit
    ``max(0, 1 - |pred - ans| / max(|ans|, 1)) * partial`` so near misses
    still carry signal; 0.0 when the completion has no number.
    """
    n = len(completions)
    answers = _column(kwargs, column, n, "numeric_match")
    scores = []
    for row, (c, ans) in enumerate(zip(completions, answers)):
        ref = _reference_number(ans, column, row)
        pred = _last_number(completion_text(c))
        if pred is None or not math.isfinite(pred):
            scores.append(0.0)
            continue
        scale = max(abs(ref), 1.0)
        err = abs(pred - ref)
        if err <= tol * scale:
            scores.append(1.0)
        else:
            scores.append(max(0.0, 1.0 - err / scale) * float(partial))
    return scores


def _key_fraction(obj: Any, required_keys: Sequence[str] | None) -> float:
    """Fraction of required keys present; 1.0 when nothing is required."""
    if not required_keys:
        return 1.0
    if not isinstance(obj, dict):
        return 0.0
    return sum(1 for k in required_keys if k in obj) / len(required_keys)


def _json_score(text: str, required_keys: Sequence[str] | None) -> float:
    """Whole-text JSON earns 1.0, an embedded object/array 0.5, times key credit."""
    text = text.strip()
    fenced = _FENCE_RE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    try:
        return _key_fraction(json.loads(text), required_keys)
    except (ValueError, RecursionError):
        pass
    decoder = json.JSONDecoder()
    best = 0.0
    starts = [i for i, ch in enumerate(text) if ch in "{["][:_MAX_JSON_CANDIDATES]
    for start in starts:
        try:
            obj, _ = decoder.raw_decode(text, start)
        except (ValueError, RecursionError):
            continue
        best = max(best, 0.5 * _key_fraction(obj, required_keys))
        if best >= 0.5:
            break
    return best


def json_valid(
    prompts: list[Any],
    completions: list[Any],
    required_keys: Sequence[str] | None = None,
    **kwargs: Any,
) -> list[float]:
    """1.0 if the completion (optionally in a ```json fence) is JSON, 0.5 if it
    only contains a JSON object/array; ``required_keys`` scales this by the
    fraction of keys present so half-right structures still earn credit."""
    if isinstance(required_keys, str):
        required_keys = [required_keys]
    return [_json_score(completion_text(c), required_keys) for c in completions]


def _row_target(value: Any, default: float) -> float:
    """A per-row length target; values that are not numbers fall back to the default.

    A dataset column named ``target`` usually means something else (see
    :func:`char_fraction`), so a non-numeric one is not a length target.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return default
    return float(value)


def length_penalty(
    prompts: list[Any],
    completions: list[Any],
    target: float | list[Any] = 50,
    unit: str = "words",
    **kwargs: Any,
) -> list[float]:
    """Verbosity penalty ``-(max(0, length - target) / target)`` clipped to [-1, 0].

    Length is whitespace-split words (a cheap tokenizer-free proxy for
    tokens) or characters with ``unit: chars``.
    """
    if unit not in ("words", "chars"):
        raise ValueError(f"length_penalty: unit must be 'words' or 'chars', got {unit!r}")
    n = len(completions)
    scores = []
    for c, t in zip(completions, _per_row(target, n)):
        goal = _row_target(t, 50.0)
        if goal <= 0:
            raise ValueError(f"length_penalty: target must be > 0, got {goal}")
        text = completion_text(c)
        length = len(text.split()) if unit == "words" else len(text)
        scores.append(max(-1.0, -(max(0.0, length - goal) / goal)))
    return scores


def soft_overlong(length: int, max_tokens: int, buffer: int, factor: float = 1.0) -> float:
    """DAPO's soft overlong punishment of one completion of `length` tokens against a budget of `max_tokens`:
    0 up to ``max_tokens - buffer`` tokens, then linear down to ``-factor`` at ``max_tokens``, ``-factor`` beyond.

    The ramp tells a completion that is about to be cut from one that merely runs long, so the policy learns
    to end before the budget rather than being punished only once it is cut (the cut itself is abrupt)."""
    if buffer <= 0 or buffer > max_tokens:
        raise ValueError(f"overlong_penalty: buffer must be in 1..max_tokens ({max_tokens}), got {buffer}")
    start = max_tokens - buffer
    if length <= start:
        return 0.0
    if length >= max_tokens:
        return -float(factor)
    return factor * (start - length) / buffer


def _whole(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise ValueError(f"overlong_penalty: {name} must be a whole number of tokens, got {value!r}")
    return int(value)


def overlong_penalty(
    prompts: list[Any],
    completions: list[Any],
    completion_lengths: list[int] | None = None,
    max_tokens: int | list[int] | None = None,
    buffer: int | None = None,
    factor: float = 1.0,
    **kwargs: Any,
) -> list[float]:
    """DAPO's soft overlong punishment (:func:`soft_overlong`) on each completion's sampled token count.

    The sampling stages pass ``completion_lengths`` (the tokens the sampler drew, EOS included) and
    ``max_tokens`` (the stage's budget) to a reward that names them; a configured ``max_tokens`` wins.
    ``buffer`` defaults to a fifth of the budget (DAPO: 4,096 of 20,480 tokens).
    """
    n = len(completions)
    if completion_lengths is None or max_tokens is None:
        raise ValueError("overlong_penalty: needs each completion's token count and the token budget, which the "
                         "sampling stages pass (completion_lengths, max_tokens); scoring text alone has neither")
    budgets = _per_row(max_tokens, n)
    scores = []
    for length, budget in zip(completion_lengths, budgets):
        budget = _whole(budget, "max_tokens")
        span = max(1, budget // 5) if buffer is None else _whole(buffer, "buffer")
        scores.append(soft_overlong(_whole(length, "a completion length"), budget, span, float(factor)))
    return scores


def char_fraction(
    prompts: list[Any],
    completions: list[Any],
    char: str | None = None,
    column: str = "target",
    **kwargs: Any,
) -> list[float]:
    """Fraction of non-whitespace characters equal to the row's target character.

    The target comes from ``char`` when configured, else from ``column``.
    It is a dense, trivially learnable signal, which is why the GRPO demo
    uses it to show reward going up within a few steps.
    """
    n = len(completions)
    targets = _per_row(char, n) if char is not None else _column(kwargs, column, n, "char_fraction")
    scores = []
    for row, (c, t) in enumerate(zip(completions, targets)):
        t = "" if t is None else str(t)
        if len(t) != 1:
            raise ValueError(f"char_fraction: target for row {row} must be one character, got {t!r}")
        chars = [ch for ch in completion_text(c) if not ch.isspace()]
        scores.append(sum(1 for ch in chars if ch == t) / len(chars) if chars else 0.0)
    return scores


# Columns each built-in reads, given its configured kwargs (a configured option replaces the column).
regex_match.required_columns = lambda kw: [] if kw.get("pattern") is not None else ["pattern"]  # type: ignore[attr-defined]
exact_match.required_columns = lambda kw: [kw.get("column", "answer")]  # type: ignore[attr-defined]
numeric_match.required_columns = lambda kw: [kw.get("column", "answer")]  # type: ignore[attr-defined]
char_fraction.required_columns = lambda kw: [] if kw.get("char") is not None else [kw.get("column", "target")]  # type: ignore[attr-defined]
