"""Prompt data checked before a run starts: non-text prompts, columns rewards read, prompt length."""
import pytest

from rlft.data import DataError
from rlft.data.checks import check_prompt_values, fit_prompts, missing_reward_columns
from rlft.rewards import build_reward_suite, required_columns, requires_columns


def test_every_bad_prompt_row_is_reported_at_once():
    values = ["ok", 5, None, {"a": 1}, 7, "", [{"role": "user", "content": "hi"}]] + [3] * 10
    problems = check_prompt_values(values, "prompt", "data.train")
    assert any("got int in rows 1, 4, 7, 8, 9 and 7 more" in p for p in problems)
    assert any("got dict in row 3" in p for p in problems)
    assert any("empty prompt in rows 2, 5" in p for p in problems)
    assert check_prompt_values(["a", [{"role": "user", "content": "b"}]], "prompt", "x") == []


def test_reward_columns_declared_by_builtins_and_custom_functions():
    suite = build_reward_suite([{"fn": "char_fraction"}, {"fn": "char_fraction", "kwargs": {"char": "z"}},
                                {"fn": "numeric_match", "kwargs": {"column": "gold"}}, {"fn": "regex_match"},
                                {"fn": "regex_match", "kwargs": {"pattern": "x"}}, {"fn": "json_valid"}])
    assert [required_columns(r.fn, r.kwargs) for r in suite.rewards] == [["target"], [], ["gold"], ["pattern"], [], []]

    @requires_columns("answer", "difficulty")
    def custom(prompts, completions, **kw):
        return [0.0] * len(completions)

    assert required_columns(custom) == ["answer", "difficulty"]
    assert required_columns(requires_columns(lambda kw: [kw["col"]])(custom), {"col": "c"}) == ["c"]
    problems = missing_reward_columns(["prompt_id", "answr"], {"custom": ["answer"], "ok": []}, "data.train")
    assert problems == ["data.train: reward 'custom' reads column 'answer', which the data does not have "
                        "(columns: prompt_id, answr); did you mean 'answr'?"]


def _count(p):
    return len(p.split())


def _cut(p, n):
    return " ".join(p.split()[n:])


def test_fit_prompts_truncate_drop_and_error():
    prompts = ["a b c", "a b c d e f g", "x y z w v u t s r q"]
    rep = fit_prompts(prompts, _count, _cut, 4, "truncate", "data.train")
    assert rep.keep == [0, 1, 2] and rep.prompts == {1: "d e f g", 2: "t s r q"}
    assert (rep.truncated, rep.dropped, rep.longest) == (2, 0, 10)
    assert "2 prompt(s) longer than 4 tokens (longest 10): kept the last 4 tokens of 2" in rep.message("data.train")
    rep = fit_prompts(prompts, _count, _cut, 4, "drop", "data.train")
    assert rep.keep == [0] and rep.dropped == 2 and rep.prompts == {}
    with pytest.raises(DataError, match="2 prompt\\(s\\) longer than 4 tokens \\(longest 10\\) in rows 1, 2"):
        fit_prompts(prompts, _count, _cut, 4, "error", "data.train")
    with pytest.raises(DataError, match="every prompt is longer"):
        fit_prompts(prompts[1:], _count, _cut, 4, "drop", "data.train")
    assert fit_prompts(prompts, _count, _cut, 100, "error", "d").message("d") is None
