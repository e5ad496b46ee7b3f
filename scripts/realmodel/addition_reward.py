"""Reward for the addition benchmark (scripts/bench_realmodel_learning.py): 1.0 when the completion's answer
equals the row's `answer`, else 0.0. The answer is the first number after the first `=` when there is one
("3 + 4 = 7" answers 7), otherwise the first number ("7", "The answer is 7."). It never raises: anything
unparseable scores 0.0."""

from __future__ import annotations

import re
from typing import Any

_NUMBER = re.compile(r"-?\d+")


def completion_text(completion: Any) -> str:
    """The text of a completion: a string, or the content of the last chat message."""
    try:
        if isinstance(completion, str):
            return completion
        if isinstance(completion, dict):
            return str(completion.get("content", ""))
        if isinstance(completion, (list, tuple)) and completion:
            return completion_text(completion[-1])
    except Exception:
        pass
    return ""


def answer_of(text: str) -> int | None:
    """The answer in `text`: the first integer after the first `=`, else the first integer; or None."""
    text = text or ""
    if "=" in text:
        text = text.split("=", 1)[1]
    m = _NUMBER.search(text)
    return int(m.group()) if m else None


def is_correct(text: str, answer: Any) -> bool:
    try:
        got = answer_of(text)
        return got is not None and got == int(str(answer).strip())
    except Exception:
        return False


_NUMBER_ONLY = re.compile(r"\s*-?\d+\.?\s*")


def is_number_only(text: str) -> bool:
    """Whether `text` does what the prompt asks, "Answer with the number only": one integer (a final period allowed)."""
    return bool(_NUMBER_ONLY.fullmatch(text or ""))


def number_only(prompts: Any, completions: Any, **kwargs: Any) -> list[float]:
    """One float per completion: 1.0 if it is the number alone, whether right or wrong (the instruction followed)."""
    try:
        return [1.0 if is_number_only(completion_text(c)) else 0.0 for c in completions]
    except Exception:
        return []


def correct(prompts: Any, completions: Any, answer: Any = None, **kwargs: Any) -> list[float]:
    """One float per completion: 1.0 if its first number is the answer."""
    try:
        n = len(completions)
    except Exception:
        return []
    answers = answer if isinstance(answer, (list, tuple)) and len(answer) == n else [answer] * n
    return [1.0 if is_correct(completion_text(c), a) else 0.0 for c, a in zip(completions, answers)]
