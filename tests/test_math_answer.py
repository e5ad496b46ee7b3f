"""The built-in math_answer reward (math-verify, the checker TRL's accuracy_reward uses): worked cases in both modes,
an unparseable reference, and validate-config naming a missing package."""

import pytest

from conftest import run_cli
from rlft.rewards import math_answer as mod
from rlft.rewards.registry import check_reward_spec, resolve_reward_fn

pytest.importorskip("math_verify")  # the dev extra installs it: CI runs every case below


def score(completions, answers, **kw):
    return mod.math_answer(None, completions, answer=answers, **kw)


def test_strict_needs_latex_and_compares_as_mathematics():
    # strict: LaTeX in \\boxed{} or after an answer phrase ("the answer is", "Final answer:"); a bare $2$ is not one
    assert score(["$2$", "Final answer: $2$", "2"], ["2"] * 3) == [0.0, 1.0, 0.0]
    got = score(["The answer is $\\frac{1}{2}$.", "So \\boxed{0.5}", "\\boxed{(x+1)^2}", "the answer is 12",
                 "\\boxed{3}", ""], ["0.5", "1/2", "x^2+2x+1", "12", "4", "7"])
    assert got == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]


def test_lenient_also_reads_plain_expressions():
    got = score(["the answer is 12", "so it is 3/4", "2 + 2 = 5", "\\boxed{7}"], ["12", "0.75", "4", "7"],
                mode="lenient")
    assert got == [1.0, 1.0, 0.0, 1.0]


def test_reference_that_does_not_parse_is_unscored_and_mode_is_checked():
    assert score(["\\boxed{1}", "\\boxed{1}"], ["", None]) == [None, None]
    with pytest.raises(ValueError, match="mode must be one of strict, lenient"):
        score(["1"], ["1"], mode="loose")


def test_resolves_as_a_builtin_reading_the_answer_column():
    fn = resolve_reward_fn("math_answer")
    assert fn([None], ["Final answer: $2$"], answer=["2"]) == [1.0]
    assert fn.required_columns({}) == ["answer"] and fn.required_columns({"column": "solution"}) == ["solution"]
    assert check_reward_spec("math_answer") is None


def test_missing_package_is_named_at_validate(monkeypatch, tmp_path):
    monkeypatch.setattr(mod.importlib.util, "find_spec", lambda name: None)
    assert "pip install 'rlft[math]'" in check_reward_spec("math_answer")
    (tmp_path / "d.jsonl").write_text('{"prompt": "1+1?", "answer": "2"}\n' * 16)
    # in a subprocess the package is installed: validate passes, and names the column it reads when it is missing
    res = run_cli("validate-config", "data.train=d.jsonl", "rewards=[math_answer]", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    res = run_cli("validate-config", "data.train=d.jsonl", "rewards=[{fn: math_answer, kwargs: {column: solution}}]",
                  cwd=tmp_path)
    assert res.returncode == 2 and "reads column `solution`" in res.stderr, res.stderr
