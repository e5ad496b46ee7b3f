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
"""

from __future__ import annotations

import importlib.util
import threading
from typing import Any

PACKAGE = "math_verify"
INSTALL_HINT = "pip install 'rlft[math]' (or pip install 'math-verify[antlr4_13_2]')"
MODES = ("strict", "lenient")


def missing_package() -> str | None:
    """Why math_answer cannot score here (the package is not installed), or None."""
    if importlib.util.find_spec(PACKAGE) is None:
        return f"reward `math_answer` needs the math-verify package, which is not installed: {INSTALL_HINT}"
    return None


def _extraction(mode: str) -> list:
    from latex2sympy2_extended import NormalizationConfig
    from math_verify import ExprExtractionConfig, LatexExtractionConfig

    latex = LatexExtractionConfig(normalization_config=NormalizationConfig(units=True), boxed_match_priority=0,
                                  try_extract_without_anchor=mode == "lenient")
    return [latex] if mode == "strict" else [latex, ExprExtractionConfig()]


def _reference(parse, ref: Any, timeout: int | None) -> list:
    """The reference parsed; a bare LaTeX expression (`x^2+2x+1`, no `$`) is read as math, as a dataset means it."""
    if ref is None:
        return []
    text = str(ref)
    return parse(text, parsing_timeout=timeout) or (parse(f"${text}$", parsing_timeout=timeout) if "$" not in text
                                                    else [])


def math_answer(prompts: list[Any], completions: list[Any], column: str = "answer", mode: str = "strict",
                **kwargs: Any) -> list[float | None]:
    """1.0 when the completion's answer equals the row's `column` as mathematics, else 0.0; None when the
    reference does not parse. `mode`: strict (LaTeX answers only) or lenient (plain expressions too)."""
    from rlft.rewards.builtin import _column, completion_text

    if mode not in MODES:
        raise ValueError(f"math_answer: mode must be one of {', '.join(MODES)}, got {mode!r}")
    why = missing_package()
    if why:
        raise ImportError(why)
    import logging

    from math_verify import parse, verify

    # math-verify times out with signal.alarm, which only the main thread may set (rewards can run in a worker)
    main = threading.current_thread() is threading.main_thread()
    timeout = 5 if main else None
    if not main:
        for name in ("math_verify.parser", "math_verify.grader"):
            logging.getLogger(name).setLevel(logging.ERROR)  # "timeout disabled" once per call otherwise
    references = _column(kwargs, column, len(completions), "math_answer")
    extraction = _extraction(mode)
    scores: list[float | None] = []
    for completion, ref in zip(completions, references):
        gold = _reference(parse, ref, timeout)
        if not gold:
            scores.append(None)
            continue
        answer = parse(completion_text(completion), extraction_config=extraction, extraction_mode="first_match",
                       parsing_timeout=timeout)
        scores.append(float(verify(gold, answer, timeout_seconds=timeout)) if answer else 0.0)
    return scores


math_answer.required_columns = lambda kw: [kw.get("column", "answer")]  # type: ignore[attr-defined]
