"""The built-in `math_answer` reward: is the completion's final answer mathematically the reference?

The check is math-verify's (the parser and verifier TRL's `accuracy_reward` uses), so `\\frac{1}{2}`, `0.5` and
`1/2` agree, and `\\boxed{x^2+2x+1}` equals `(x+1)^2`. It is an optional extra (`pip install 'rlft[math]'`):
validate-config names the missing package before a run starts, and importing this module costs nothing until a
completion is scored (math-verify pulls in sympy).

Two modes:
  strict   (default) the answer must be LaTeX in `\\boxed{...}` or after an answer phrase ("the answer is $12$",
           "Final answer: $12$"), as TRL's accuracy_reward requires: "the answer is 12" and a bare `$12$` score 0.
  lenient  a plain expression or number counts too (the last one when there are several).
A reference that does not parse scores None (that completion is left unscored, as TRL skips it).

A check never stalls the run: it runs in a worker process that is killed past the check's time limit
(rlft/rewards/math_worker.py), the whole call ends within the reward's `timeout_s`, the answer is read from a
bounded window of the completion, and a numeric power or factorial too large to compute (`9^{9^{9^9}}`) is not
parsed at all. Each of these leaves that completion unscored and counted, as any reward failure (`Unscored`).
"""

from __future__ import annotations

import importlib.util
import math
import re
import time
from typing import Any

from rlft.rewards.unscored import Unscored

PACKAGE = "math_verify"
INSTALL_HINT = "pip install 'rlft[math]' (or pip install 'math-verify[antlr4_13_2]')"
MODES = ("strict", "lenient")

# the completion's text handed to the parser: its last MAX_ANSWER_CHARS characters (the final answer ends a
# solution), or MAX_ANSWER_CHARS from its last `\boxed` when that starts earlier. sympy's parse of a plain
# expression grows faster than linearly with its length (a 100 KB repetition loop: over a minute), 4,000
# characters parse in well under a second.
MAX_ANSWER_CHARS = 4_000
# a longer reference is not a final answer: that row is left unscored rather than parsed
MAX_REFERENCE_CHARS = 1_000
# a numeric power or factorial whose value would have more digits than this is not computed (sympy evaluates
# `9^{9^{9^9}}` exactly, for ever): the completion is left unscored
MAX_RESULT_DIGITS = 10_000
# one check (reference and answer parsed, then compared) may take this long before its worker is killed
ITEM_TIMEOUT_S = 10.0


def missing_package() -> str | None:
    """Why math_answer cannot score here (the package is not installed), or None."""
    if importlib.util.find_spec(PACKAGE) is None:
        return f"reward `math_answer` needs the math-verify package, which is not installed: {INSTALL_HINT}"
    return None


def answer_window(text: str) -> str:
    """The part of a completion the parser reads (MAX_ANSWER_CHARS)."""
    if len(text) <= MAX_ANSWER_CHARS:
        return text
    start = len(text) - MAX_ANSWER_CHARS
    boxed = text.rfind("\\boxed")
    if 0 <= boxed < start:
        return text[boxed:boxed + MAX_ANSWER_CHARS]
    return text[start:]


_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_SPACE = re.compile(r"\s*")
_FACTORIAL = re.compile(r"(\d+)\s*!")


def _braced(text: str, i: int) -> int:
    """The index just past the `}` closing the `{` at text[i], or -1."""
    depth = 0
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return j + 1
    return -1


def _power_log10(text: str, i: int) -> tuple[float, int] | None:
    """(log10 of the value, end) of the numeric power starting at text[i] (`9^{9^9}`, `9^9`, `9**9**9`, one
    number), or None when text[i] starts no number. A brace group that is not itself such a power ends the
    reading: its value is unknown and counts as small."""
    m = _NUMBER.match(text, i)
    if not m:
        return None
    base, end = float(m.group()), m.end()
    j = _SPACE.match(text, end).end()
    op = "^" if text.startswith("^", j) else "**" if text.startswith("**", j) else None
    if op is None:
        return (math.log10(base) if base > 0 else 0.0), end
    j = _SPACE.match(text, j + len(op)).end()
    if op == "^" and text.startswith("{", j):
        close = _braced(text, j)
        if close < 0:
            return (math.log10(base) if base > 0 else 0.0), end
        inner = text[j + 1:close - 1].strip()
        got = _power_log10(inner, 0)
        if got is None or got[1] != len(inner):
            return (math.log10(base) if base > 0 else 0.0), close
        exp_log, end = got[0], close
    elif op == "^":  # LaTeX: an unbraced exponent is one character
        if not text[j:j + 1].isdigit():
            return (math.log10(base) if base > 0 else 0.0), end
        exp_log, end = math.log10(int(text[j])) if text[j] != "0" else -math.inf, j + 1
    else:  # `**` is right-associative over the whole chain
        got = _power_log10(text, j)
        if got is None:
            return (math.log10(base) if base > 0 else 0.0), end
        exp_log, end = got
    if base <= 1:
        return 0.0, end
    exponent = math.inf if exp_log > 300 else 10.0 ** exp_log
    return exponent * math.log10(base), end


def too_large(text: str) -> str | None:
    """Why `text` holds a number too large to compute (a power or factorial of more than MAX_RESULT_DIGITS
    digits), or None."""
    for m in _NUMBER.finditer(text):
        if m.start() and (text[m.start() - 1].isdigit() or text[m.start() - 1] == "."):
            continue
        got = _power_log10(text, m.start())
        if got and got[0] > MAX_RESULT_DIGITS:
            snippet = text[m.start():got[1]]
            snippet = snippet if len(snippet) <= 40 else snippet[:37] + "..."
            return f"`{snippet}` would have more than {MAX_RESULT_DIGITS:,} digits"
    for m in _FACTORIAL.finditer(text):
        n = int(m.group(1)) if len(m.group(1)) < 12 else 10 ** 12
        if n > 3 and n * math.log10(n / math.e) > MAX_RESULT_DIGITS:
            return f"`{m.group(1)}!` would have more than {MAX_RESULT_DIGITS:,} digits"
    return None


def math_answer(prompts: list[Any], completions: list[Any], column: str = "answer", mode: str = "strict",
                reward_timeout_s: float | None = None, **kwargs: Any) -> list[Any]:
    """1.0 when the completion's answer equals the row's `column` as mathematics, else 0.0; None when the
    reference does not parse. `mode`: strict (LaTeX answers only) or lenient (plain expressions too).
    `reward_timeout_s` (the reward entry's timeout_s, passed by rlft): the call returns within it, the checks it
    had no time for `Unscored`."""
    from rlft.rewards.builtin import _column, completion_text
    from rlft.rewards.math_worker import checker

    if mode not in MODES:
        raise ValueError(f"math_answer: mode must be one of {', '.join(MODES)}, got {mode!r}")
    why = missing_package()
    if why:
        raise ImportError(why)
    deadline = None
    if reward_timeout_s is not None:  # return a little before the caller abandons the call, with what is done
        deadline = time.monotonic() + reward_timeout_s - min(1.0, 0.1 * reward_timeout_s)
    references = _column(kwargs, column, len(completions), "math_answer")
    scores: list[Any] = [None] * len(completions)
    items, rows = [], []
    for i, (completion, ref) in enumerate(zip(completions, references)):
        if ref is None:
            continue
        reference, text = str(ref), answer_window(completion_text(completion))
        if len(reference) > MAX_REFERENCE_CHARS:
            scores[i] = Unscored("reference too long", f"its reference has {len(reference):,} characters, more "
                                 f"than the {MAX_REFERENCE_CHARS:,} a final answer may have")
            continue
        large = too_large(reference)
        if large:
            scores[i] = Unscored("number too large", f"its reference's {large}")
            continue
        large = too_large(text)
        if large:
            scores[i] = Unscored("number too large", f"its answer's {large}; not computed")
            continue
        items.append((reference, text))
        rows.append(i)
    for i, (kind, value) in zip(rows, checker().check(mode, items, ITEM_TIMEOUT_S, deadline)):
        scores[i] = value if kind == "score" else None if kind == "none" else Unscored("timed out", value)
    return scores


math_answer.required_columns = lambda kw: [kw.get("column", "answer")]  # type: ignore[attr-defined]
