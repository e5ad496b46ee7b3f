"""The built-in math_answer reward (math-verify, the checker TRL's accuracy_reward uses): worked cases in both modes,
an unparseable reference, and validate-config naming a missing package."""

import time

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


# --- a check never stalls the run ------------------------------------------------------------------------------
TOWER = "\\boxed{9^{9^{9^{9}}}}"  # 20 characters: sympy would compute it for ever
LOOP = "1 " * 50_000  # 100 KB: what a collapsing policy writes; sympy's parse of it grows faster than linearly


def test_numbers_too_large_to_compute_are_found_before_parsing():
    for text in (TOWER, "9^{9^9}", "10^{100000}", "9**9**9**9", "so 100000! it is", "\\boxed{10^{10^{5}}}"):
        assert mod.too_large(text), text
    for text in ("2^{10}", "2^{2^{10}}", "e^{x^2}", "x^{9^9}", "10^9", "10!", "3.5^{2}", "\\frac{1}{2}", LOOP):
        assert mod.too_large(text) is None, text
    # the parser reads a bounded window: the tail, or from the last \boxed when it starts earlier
    assert mod.answer_window(LOOP) == LOOP[-mod.MAX_ANSWER_CHARS:]
    boxed = "\\boxed{4}" + "x" * 10_000
    assert mod.answer_window(boxed).startswith("\\boxed{4}") and len(mod.answer_window(boxed)) == mod.MAX_ANSWER_CHARS


def test_a_power_tower_is_counted_unscored_at_once_with_the_default_timeout():
    from rlft.rewards.safe import DEFAULT_TIMEOUT_S, SafeReward

    reward = SafeReward("math_answer", mod.math_answer, timeout_s=DEFAULT_TIMEOUT_S)
    started = time.monotonic()
    got = reward(None, [TOWER, "\\boxed{4}"], answer=["4", "4"])
    wall = time.monotonic() - started
    assert got == [None, 1.0] and reward.errors == 1, got
    assert "`9^{9^{9^{9}}}` would have more than 10,000 digits" in reward.last_error
    assert wall <= 10.0, wall  # the worker's first start (sympy imported) and two checks; was over 75 s


def test_a_check_past_its_limit_is_killed_and_the_rest_go_to_a_fresh_worker(monkeypatch):
    """The guards off: the loop reaches sympy. Its check is killed at ITEM_TIMEOUT_S (below math-verify's own
    1 s alarm, so the kill is what stops it), and the checks after it are scored by a new worker."""
    from rlft.rewards.math_worker import checker
    from rlft.rewards.unscored import Unscored

    monkeypatch.setattr(mod, "MAX_ANSWER_CHARS", 10 ** 9)
    monkeypatch.setattr(mod, "ITEM_TIMEOUT_S", 0.5)
    assert score(["\\boxed{4}"], ["4"]) == [1.0]  # a started worker
    kills = checker().kills
    started = time.monotonic()
    got = score([LOOP, "\\boxed{4}", "\\boxed{5}"], ["4", "4", "4"], mode="lenient")
    wall = time.monotonic() - started
    assert isinstance(got[0], Unscored) and got[0].kind == "timed out" and "ran past 0.5 s" in got[0].reason
    assert got[1:] == [1.0, 0.0] and checker().kills == kills + 1
    assert wall <= 0.5 + 8.0, wall  # the kill, then a fresh worker's start (about a second; 8 s on a busy CPU)


def test_a_call_returns_within_its_timeout_and_counts_what_it_did_not_check(monkeypatch):
    from rlft.rewards.safe import SafeReward

    monkeypatch.setattr(mod, "MAX_ANSWER_CHARS", 10 ** 9)  # the loop reaches sympy, for seconds
    reward = SafeReward("math_answer", mod.math_answer, timeout_s=3, kwargs={"mode": "lenient"})
    started = time.monotonic()
    got = reward(None, ["\\boxed{4}", LOOP, "\\boxed{4}"], answer=["4", "4", "4"])
    wall = time.monotonic() - started
    assert got == [1.0, None, None] and reward.errors == 2, got
    assert "not checked" in reward.last_error and "timeout_s" in reward.last_error
    assert wall <= 3 + 0.5, wall  # returns 0.3 s before timeout_s (10%, at most 1 s), with what it finished


@pytest.mark.e2e
def test_rewards_try_on_a_tower_and_a_loop_ends_within_timeout_s(tmp_path):
    """The issue's two completions through `rlft rewards try`: lenient, timeout_s 5 (was 75 s and 74 s)."""
    import json

    rows = [{"row": {"prompt": "2+2?", "answer": "4"}, "completion": c} for c in (TOWER, LOOP, "\\boxed{4}")]
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "cfg.yaml").write_text("rewards: [{fn: math_answer, kwargs: {mode: lenient}, timeout_s: 5}]\n")
    started = time.monotonic()
    res = run_cli("rewards", "try", "-c", "cfg.yaml", "--completions", "c.jsonl", "-o", "rewards_try.jsonl",
                  cwd=tmp_path)
    wall = time.monotonic() - started
    assert res.returncode == 0, res.stderr
    assert wall <= 5 + 10, wall  # timeout_s, plus 10 s for the CLI's start on a busy CPU
    got = [json.loads(line)["rewards"]["math_answer"] for line in (tmp_path / "rewards_try.jsonl").open()]
    assert got == [None, 0.0, 1.0], got
    assert "would have more than 10,000 digits" in res.stdout + res.stderr
