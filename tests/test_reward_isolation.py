"""Reward code that misbehaves (exits, raises KeyboardInterrupt, hangs) never ends or blocks a run."""
import sys
import threading
import time

import pytest

from rlft.rewards import RewardSuite, SafeReward, build_reward_suite


def _exits(prompts, completions, **kw):
    sys.exit(0)


def _keyboard(prompts, completions, **kw):
    raise KeyboardInterrupt


def _hangs(prompts, completions, **kw):
    time.sleep(60)
    return [1.0] * len(completions)


@pytest.mark.parametrize("timeout_s", [30.0, None], ids=["worker", "inline"])
@pytest.mark.parametrize("fn, kind", [(_exits, "SystemExit"), (_keyboard, "KeyboardInterrupt")])
def test_base_exceptions_from_reward_code_are_counted_failures(fn, kind, timeout_s):
    r = SafeReward("bad", fn, timeout_s=timeout_s)
    assert r([""] * 3, ["a", "b", "c"]) == [None, None, None]
    assert r.errors == 3 and kind in r.last_error


def test_inline_keyboard_interrupt_is_the_users_once_the_run_is_interrupted():
    r = SafeReward("bad", _keyboard, timeout_s=None)
    r.should_abort = lambda: True  # rlft's handler saw a Ctrl-C: a second one must still stop the run
    with pytest.raises(KeyboardInterrupt):
        r([""], ["a"])


def test_a_hung_reward_times_out_with_the_failure_value_and_is_counted():
    r = SafeReward("slow", _hangs, timeout_s=0.3)
    start = time.monotonic()
    assert r([""] * 2, ["a", "b"]) == [None, None]
    assert time.monotonic() - start < 3
    assert r.errors == 2 and "timeout_s=0.3" in r.last_error
    assert r.pop_counts()["errors"] == 2


def test_reward_calls_run_in_a_worker_thread_and_return_their_scores():
    names = []

    def fn(prompts, completions, **kw):
        names.append(threading.current_thread().name)
        return [0.5] * len(completions)

    assert SafeReward("w", fn)([""], ["a"]) == [0.5]
    assert names == ["rlft-reward-w"]
    assert SafeReward("i", fn, timeout_s=None)([""], ["a"]) == [0.5]
    assert names[-1] == threading.current_thread().name


def test_interrupt_stops_waiting_for_a_hung_reward_and_the_guard_stays_quiet():
    flag = {"stop": False}
    suite = RewardSuite([SafeReward("slow", _hangs, timeout_s=600)], max_failure_fraction=0.1, min_completions=1)
    suite.abort_when(lambda: flag["stop"])
    threading.Timer(0.3, lambda: flag.update(stop=True)).start()
    start = time.monotonic()
    scores = suite.score([""] * 2, ["a", "b"])  # would trip the guard if it were counted against it
    assert time.monotonic() - start < 6  # 0.3 s, then at most the 2 s grace a running call gets
    assert scores.total == [None, None]
    assert suite.rewards[0].errors == 2 and "interrupted" in suite.rewards[0].last_error


def test_after_an_interrupt_a_quick_reward_still_scores():
    def quick(prompts, completions, **kw):
        time.sleep(0.3)
        return [0.25] * len(completions)

    r = SafeReward("quick", quick)
    r.should_abort = lambda: True
    assert r([""], ["a"]) == [0.25]


def test_timeout_from_config_and_its_checks():
    suite = build_reward_suite([{"fn": "char_fraction"}, {"fn": "char_fraction", "timeout_s": 2},
                                {"fn": "char_fraction", "timeout_s": None}])
    assert [r.timeout_s for r in suite.rewards] == [30.0, 2.0, None]
    with pytest.raises(ValueError, match="timeout_s"):
        build_reward_suite([{"fn": "char_fraction", "timeout_s": 0}])


def test_reward_module_exiting_at_import_is_a_resolve_error(tmp_path):
    from rlft.rewards import RewardResolveError, resolve_reward_fn

    (tmp_path / "exits.py").write_text("import sys\nsys.exit(0)\ndef f(p, c): pass\n")
    with pytest.raises(RewardResolveError, match="SystemExit"):
        resolve_reward_fn(f"{tmp_path / 'exits.py'}:f")
    (tmp_path / "rlft_exits_mod.py").write_text("import sys\nsys.exit(0)\ndef f(p, c): pass\n")
    with pytest.raises(RewardResolveError, match="SystemExit"):
        resolve_reward_fn("rlft_exits_mod:f", base_dir=tmp_path)
