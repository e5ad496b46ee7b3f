"""Tests for rlft.rewards: built-ins, spec resolution, safe scoring and the suite."""

from __future__ import annotations

import logging
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rlft.rewards import (
    BUILTIN_REWARDS,
    RewardFailureError,
    RewardResolveError,
    RewardSuite,
    SafeReward,
    build_reward_suite,
    char_fraction,
    check_reward_spec,
    exact_match,
    format_match,
    json_valid,
    length_penalty,
    numeric_match,
    regex_match,
    resolve_reward_fn,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "trl", "peft", "datasets", "accelerate")


# --- built-ins -------------------------------------------------------------


def test_regex_match_search_fullmatch_and_flags():
    comps = ["The answer is 42", "no digits", "42"]
    assert regex_match([], comps, pattern=r"\d+") == [1.0, 0.0, 1.0]
    assert regex_match([], comps, pattern=r"\d+", fullmatch=True) == [0.0, 0.0, 1.0]
    assert regex_match([], ["HELLO"], pattern="hello") == [0.0]
    assert regex_match([], ["HELLO"], pattern="hello", flags="IGNORECASE") == [1.0]
    assert regex_match([], ["a\nHELLO"], pattern="^hello$", flags="IGNORECASE|MULTILINE") == [1.0]


def test_regex_match_requires_pattern():
    with pytest.raises(ValueError, match="pattern"):
        regex_match([], ["x"])


def test_regex_match_pattern_per_row_from_column():
    assert regex_match([], ["cat", "dog"], pattern=["c.t", "c.t"]) == [1.0, 0.0]


def test_format_match_default_answer_block():
    comps = ["think... <answer>7</answer>", "<answer>\nmulti\nline</answer>", "7", "<answer>open"]
    assert format_match([], comps) == [1.0, 1.0, 0.0, 0.0]
    assert format_match([], ["<final>x</final>"], pattern=r"<final>.*</final>") == [1.0]


def test_exact_match_with_column_and_extract():
    comps = [" Paris \n", "paris", "The capital is <answer>Rome</answer>", "nothing"]
    answers = ["Paris", "Paris", "Rome", "Rome"]
    assert exact_match([], comps, answer=answers) == [1.0, 0.0, 0.0, 0.0]
    assert exact_match([], comps, answer=answers, ignore_case=True) == [1.0, 1.0, 0.0, 0.0]
    extract = r"<answer>(.*?)</answer>"
    assert exact_match([], comps, answer=answers, extract=extract) == [0.0, 0.0, 1.0, 0.0]
    assert exact_match([], ["3"], label=[3], column="label") == [1.0]


def test_exact_match_missing_column_names_it():
    with pytest.raises(KeyError, match="no column 'answer'.*solution"):
        exact_match([], ["x"], solution=["x"])


def test_numeric_match_exact_partial_and_missing():
    comps = ["so 2 + 2 = 4", "I think 5", "no idea", "total: 1,234.5", "-3.0", "between 1 and 20"]
    answers = [4, "4", 4, "1234.5", "-3", "#### 20"]
    scores = numeric_match([], comps, answer=answers)
    # 5 vs 4: 1 - 1/4 = 0.75, times partial 0.5
    assert scores == pytest.approx([1.0, 0.375, 0.0, 1.0, 1.0, 1.0])


def test_numeric_match_tolerance_and_partial_options():
    assert numeric_match([], ["3.14159"], answer=[3.14], tol=1e-3) == [1.0]
    assert numeric_match([], ["3.2"], answer=[3.14], tol=1e-3, partial=1.0) == pytest.approx([1 - 0.06 / 3.14])
    # far off: clipped at 0
    assert numeric_match([], ["1000"], answer=[1]) == [0.0]
    # small answers are measured against 1, not against |ans|
    assert numeric_match([], ["0.5"], answer=[0]) == pytest.approx([0.25])


def test_numeric_match_bad_reference_raises():
    with pytest.raises(ValueError, match="row 0"):
        numeric_match([], ["1"], answer=["n/a"])


def test_json_valid_levels():
    comps = [
        '{"a": 1}',
        '```json\n{"a": 1}\n```',
        'Here you go: {"a": 1} hope it helps',
        "[1, 2",
        "not json",
        "  [1, 2]  ",
    ]
    assert json_valid([], comps) == [1.0, 1.0, 0.5, 0.0, 0.0, 1.0]


def test_json_valid_required_keys_partial_credit():
    comps = ['{"a": 1, "b": 2}', '{"a": 1}', 'text {"a": 1} text', "[1]"]
    assert json_valid([], comps, required_keys=["a", "b"]) == [1.0, 0.5, 0.25, 0.0]


def test_length_penalty_words_and_chars():
    comps = ["one two three", " ".join(["w"] * 15), " ".join(["w"] * 100)]
    assert length_penalty([], comps, target=10) == pytest.approx([0.0, -0.5, -1.0])
    assert length_penalty([], ["abcdef"], target=4, unit="chars") == pytest.approx([-0.5])
    with pytest.raises(ValueError, match="unit"):
        length_penalty([], ["x"], unit="tokens")


def test_length_penalty_ignores_non_numeric_target_column():
    # a dataset 'target' column of characters (char_fraction's) is not a length
    assert length_penalty([], ["a " * 60], target=["a"]) == pytest.approx([-0.2])


def test_char_fraction_column_and_char():
    comps = ["aaaa", "a a b b", "", "   ", "xyz"]
    assert char_fraction([], comps, target=["a", "a", "a", "a", "a"]) == [1.0, 0.5, 0.0, 0.0, 0.0]
    assert char_fraction([], ["bbb a"], char="b") == [0.75]
    with pytest.raises(ValueError, match="one character"):
        char_fraction([], ["x"], target=["ab"])


def test_builtins_accept_chat_completions_and_extra_kwargs():
    chat = [[{"role": "assistant", "content": "<answer>3</answer>"}]]
    assert format_match(["p"], chat, trainer_state=None, unused=[1]) == [1.0]
    assert numeric_match(["p"], chat, answer=[3]) == [1.0]


def test_builtin_registry_lists_all():
    assert set(BUILTIN_REWARDS) == {
        "regex_match",
        "format_match",
        "exact_match",
        "numeric_match",
        "json_valid",
        "length_penalty",
        "overlong_penalty",
        "reward_model",
        "char_fraction",
        "math_answer",
        "llm_judge",
    }


# --- resolution ------------------------------------------------------------


def test_resolve_builtin_and_module_form():
    assert resolve_reward_fn("exact_match") is exact_match
    assert resolve_reward_fn("rlft.rewards.builtin:numeric_match") is numeric_match


def test_resolve_module_in_base_dir(tmp_path):
    source = "def score(prompts, completions, **kw):\n    return [2.0] * len(completions)\n"
    (tmp_path / "rlft_test_mod_rewards.py").write_text(source)
    fn = resolve_reward_fn("rlft_test_mod_rewards:score", base_dir=tmp_path)
    assert fn([], ["a", "b"]) == [2.0, 2.0]
    # the folder is only importable while resolving
    assert str(tmp_path.resolve()) not in sys.path


def test_resolve_file_form_relative_to_base_dir(tmp_path):
    sub = tmp_path / "rewards"
    sub.mkdir()
    source = "def brevity(prompts, completions, **kw):\n    return [1.0 / (1 + len(c)) for c in completions]\n"
    (sub / "custom.py").write_text(source)
    fn = resolve_reward_fn("rewards/custom.py:brevity", base_dir=tmp_path)
    assert fn([], ["", "abc"]) == [1.0, 0.25]
    assert check_reward_spec("rewards/custom.py:brevity", base_dir=tmp_path) is None
    # absolute paths work without base_dir
    assert resolve_reward_fn(f"{sub / 'custom.py'}:brevity")([], [""]) == [1.0]


def test_resolve_file_form_falls_back_to_cwd(tmp_path, monkeypatch):
    (tmp_path / "here.py").write_text("def f(prompts, completions, **kw):\n    return [0.0] * len(completions)\n")
    monkeypatch.chdir(tmp_path)
    assert resolve_reward_fn("here.py:f", base_dir=tmp_path / "elsewhere")([], ["x"]) == [0.0]


def test_unknown_builtin_suggests_closest_and_lists_names():
    msg = check_reward_spec("exact_mach")
    assert msg is not None
    assert "unknown built-in reward 'exact_mach'" in msg
    assert "Did you mean 'exact_match'?" in msg
    for name in BUILTIN_REWARDS:
        assert name in msg
    with pytest.raises(RewardResolveError):
        resolve_reward_fn("totally_unknown")
    assert "Did you mean" not in check_reward_spec("totally_unknown")


def test_missing_file_message(tmp_path):
    msg = check_reward_spec("nope/missing.py:f", base_dir=tmp_path)
    assert "reward file not found" in msg and "missing.py" in msg and str(tmp_path) in msg


def test_missing_function_message(tmp_path):
    (tmp_path / "r.py").write_text("def score(p, c, **kw):\n    return [1.0] * len(c)\n\nVALUE = 3\n")
    msg = check_reward_spec("r.py:scor", base_dir=tmp_path)
    assert "has no function 'scor'" in msg and "r.py" in msg
    assert "Did you mean 'score'?" in msg
    msg = check_reward_spec("r.py:VALUE", base_dir=tmp_path)
    assert "not callable" in msg


def test_module_import_failure_message(tmp_path):
    assert "could not import module 'no_such_module_xyz'" in check_reward_spec("no_such_module_xyz:f")
    (tmp_path / "broken_rewards.py").write_text("raise RuntimeError('boom at import')\ndef f(p, c): pass\n")
    # checking reads the source and never runs it; resolving (at train time) imports it and reports the failure
    assert check_reward_spec("broken_rewards.py:f", base_dir=tmp_path) is None
    with pytest.raises(RewardResolveError, match="RuntimeError: boom at "
                                                 "import.*broken_rewards.py|broken_rewards.py.*boom"):
        resolve_reward_fn("broken_rewards.py:f", base_dir=tmp_path)


def test_bad_spec_types():
    assert "non-empty string" in check_reward_spec("")
    assert "malformed" in check_reward_spec("module:")


# --- SafeReward ------------------------------------------------------------


def _picky(prompts, completions, **kw):
    if any(c == "boom" for c in completions):
        raise ValueError("cannot score boom")
    return [1.0 for _ in completions]


def test_safe_reward_passes_columns_and_kwargs():
    seen = {}

    def fn(prompts, completions, **kw):
        seen.update(kw)
        return [kw["scale"] * a for a in kw["answer"]]

    r = SafeReward("scaled", fn, kwargs={"scale": 2.0})
    assert r(["p", "q"], ["a", "b"], answer=[1, 2]) == [2.0, 4.0]
    assert seen == {"answer": [1, 2], "scale": 2.0}
    # configured kwargs win over a column of the same name
    assert r(["p"], ["a"], answer=[1], scale=[5]) == [2.0]


def test_safe_reward_raising_batch_gets_none_and_logs_once(caplog):
    r = SafeReward("picky", _picky)
    with caplog.at_level(logging.WARNING, logger="rlft.rewards"):
        assert r(["p"] * 3, ["ok", "boom", "ok"]) == [None, None, None]
        assert r(["p"] * 2, ["ok", "ok"]) == [1.0, 1.0]
        assert r(["p"] * 2, ["boom", "x"]) == [None, None]
    assert (r.calls, r.completions, r.errors) == (3, 7, 5)
    records = [rec for rec in caplog.records if rec.name == "rlft.rewards"]
    assert len(records) == 1
    assert "'picky'" in records[0].getMessage() and "cannot score boom" in records[0].getMessage()
    assert records[0].exc_info is not None
    assert "cannot score boom" in r.last_error


def test_safe_reward_wrong_count():
    r = SafeReward("short", lambda p, c, **kw: [1.0])
    assert r(["p"] * 3, ["a", "b", "c"]) == [None, None, None]
    assert r.errors == 3 and "1 scores for 3 completions" in r.last_error


def test_safe_reward_nan_inf_and_non_numeric_entries(caplog):
    values = [1.0, float("nan"), "high", None, float("inf"), 0.5, True]
    r = SafeReward("messy", lambda p, c, **kw: list(values))
    with caplog.at_level(logging.WARNING, logger="rlft.rewards"):
        out = r([""] * 7, ["c"] * 7)
        r([""] * 7, ["c"] * 7)
    assert out == [1.0, None, None, None, None, 0.5, 1.0]
    assert r.errors == 8
    # one record per failure kind: non-finite and non-numeric
    messages = [rec.getMessage() for rec in caplog.records if rec.name == "rlft.rewards"]
    assert len(messages) == 2
    assert any("non-finite" in m for m in messages) and any("non-numeric" in m for m in messages)


def test_safe_reward_accepts_tuple_and_array_like():
    class ArrayLike:
        def tolist(self):
            return [0.25, 0.75]

    assert SafeReward("t", lambda p, c, **kw: (0.1, 0.2))([], ["a", "b"]) == [0.1, 0.2]
    assert SafeReward("a", lambda p, c, **kw: ArrayLike())([], ["a", "b"]) == [0.25, 0.75]
    bad = SafeReward("s", lambda p, c, **kw: 1.0)
    assert bad([], ["a"]) == [None] and "float" in bad.last_error


def test_safe_reward_pop_counts_window():
    r = SafeReward("picky", _picky)
    r([], ["boom", "x"])
    assert r.pop_counts() == {"calls": 1, "completions": 2, "errors": 2}
    r([], ["x"])
    assert r.pop_counts() == {"calls": 1, "completions": 1, "errors": 0}
    assert (r.calls, r.completions, r.errors) == (2, 3, 2)


def test_safe_reward_has_trl_name():
    assert SafeReward("my_reward", _picky).__name__ == "my_reward"


# --- RewardSuite -----------------------------------------------------------


def _const(value):
    return lambda p, c, **kw: [value] * len(c)


def test_suite_weighted_total_and_metrics():
    suite = RewardSuite(
        [
            SafeReward("a", _const(1.0), weight=2.0),
            SafeReward("b", lambda p, c, **kw: [float(x) for x in kw["answer"]], weight=-0.5),
        ]
    )
    scores = suite.score(["p", "q"], ["x", "y"], {"answer": [2, 4]})
    assert scores.per_fn == {"a": [1.0, 1.0], "b": [2.0, 4.0]}
    assert scores.total == [1.0, 0.0]
    assert scores.valid == [True, True]
    m = suite.metrics()
    assert m["rewards/a/mean"] == 1.0 and m["rewards/a/std"] == 0.0
    assert m["rewards/b/mean"] == 3.0 and m["rewards/b/std"] == 1.0
    assert m["rewards/a/errors"] == 0.0
    assert m["reward"] == 0.5 and m["reward_std"] == 0.5
    # the window resets
    assert "reward" not in suite.metrics()


def test_suite_total_none_when_a_weighted_fn_fails():
    suite = RewardSuite(
        [
            SafeReward("ok", _const(1.0)),
            SafeReward("picky", _picky),
            SafeReward("monitor", lambda p, c, **kw: [float("nan")] * len(c), weight=0.0),
        ]
    )
    s1 = suite.score([], ["x", "y"], {})
    assert s1.total == [2.0, 2.0] and s1.valid == [True, True]
    s2 = suite.score([], ["boom", "y"], {})
    assert s2.per_fn["picky"] == [None, None]
    assert s2.total == [None, None] and s2.valid == [False, False]
    m = suite.metrics()
    assert m["rewards/picky/errors"] == 2.0
    assert m["rewards/monitor/errors"] == 4.0
    assert "rewards/monitor/mean" not in m
    assert m["reward"] == 2.0


def test_suite_failure_guard_names_failing_reward():
    rewards = [SafeReward("ok", _const(1.0)), SafeReward("picky", _picky)]
    suite = RewardSuite(rewards, max_failure_fraction=0.5, min_completions=32)
    good, bad = ["x"] * 8, ["boom"] * 8
    # 24 completions, 16 unscored: above 50% but below the minimum count
    suite.score([], good, {})
    suite.score([], bad, {})
    suite.score([], bad, {})
    with pytest.raises(RewardFailureError) as info:
        suite.score([], bad, {})
    msg = str(info.value)
    assert "24 of 32" in msg
    assert "'picky': 24 errors" in msg and "cannot score boom" in msg
    assert "'ok'" not in msg


def test_suite_guard_stays_quiet_below_threshold():
    suite = RewardSuite([SafeReward("picky", _picky)], max_failure_fraction=0.5, min_completions=4)
    for _ in range(10):
        suite.score([], ["x", "x"], {})
        suite.score([], ["boom", "x"], {})
    assert math.isclose(suite.failure_fraction, 0.5)


def test_suite_rejects_duplicate_names_and_bad_column_lengths():
    with pytest.raises(ValueError, match="unique"):
        RewardSuite([SafeReward("a", _const(1.0)), SafeReward("a", _const(1.0))])
    suite = RewardSuite([SafeReward("a", _const(1.0))])
    with pytest.raises(ValueError, match="column 'answer'"):
        suite.score([], ["x", "y"], {"answer": [1]})


def test_build_reward_suite_from_config(tmp_path):
    source = "def bonus(prompts, completions, bonus=0.0, **kw):\n    return [bonus] * len(completions)\n"
    (tmp_path / "mine.py").write_text(source)
    suite = build_reward_suite(
        [
            {"fn": "format_match", "weight": 0.5},
            {"fn": "numeric_match", "kwargs": {"partial": 0.0}},
            {"fn": "format_match", "kwargs": {"pattern": "^<answer>"}},
            {"fn": "mine.py:bonus", "kwargs": {"bonus": 0.25}, "name": "extra"},
        ],
        base_dir=tmp_path,
    )
    assert suite.names == ["format_match", "numeric_match", "format_match_2", "extra"]
    scores = suite.score(["q"], ["<answer>4</answer>"], {"answer": ["4"]})
    assert scores.total == [pytest.approx(0.5 + 1.0 + 1.0 + 0.25)]


def test_build_reward_suite_errors(tmp_path):
    with pytest.raises(ValueError, match="no rewards"):
        build_reward_suite([])
    with pytest.raises(RewardResolveError, match=r"rewards\[1\]: unknown built-in reward 'regex_mtch'"):
        build_reward_suite([{"fn": "regex_match"}, {"fn": "regex_mtch"}])
    with pytest.raises(ValueError, match=r"rewards\[0\]: unknown keys kwarg"):
        build_reward_suite([{"fn": "regex_match", "kwarg": {}}])
    with pytest.raises(ValueError, match="weight"):
        build_reward_suite([{"fn": "regex_match", "weight": "heavy"}])


# --- import cost -----------------------------------------------------------


def test_light_imports_do_not_pull_heavy_libraries():
    code = textwrap.dedent(
        f"""
        import rlft.rewards, rlft.rewards.registry, rlft.rewards.builtin, rlft.rewards.safe
        import rlft.data, rlft.data.peek, sys
        print([m for m in {HEAVY!r} if m in sys.modules])
        """
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_suite_record_counts_external_totals_and_trips_the_guard():
    from rlft.rewards import RewardFailureError, build_reward_suite

    suite = build_reward_suite([{"fn": "char_fraction"}], max_failure_fraction=0.5, min_completions=32)
    suite.record(32, 10)  # 31% unscored: fine
    assert suite.failure_fraction == pytest.approx(10 / 32)
    with pytest.raises(RewardFailureError, match="no score to 40 of 64"):
        suite.record(32, 30)
