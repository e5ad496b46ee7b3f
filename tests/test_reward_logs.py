"""Reward output captured per call (prints from the reward's own thread, its log records, failures with
tracebacks, timing) and written per step to reward_logs.jsonl."""

from __future__ import annotations

import json
import logging
import sys
import threading

import pytest

from rlft.rewards.capture import capture_output
from rlft.rewards.safe import RewardSuite, SafeReward
from rlft.rollout import RewardLog


def noisy(prompts, completions, **kw):
    print("scored", len(completions))
    logging.getLogger("user.reward").warning("slow API %s", "x")
    return [1.0] * len(completions)


def test_capture_routes_only_the_capturing_thread(capsys):
    sink: list[str] = []
    seen_elsewhere = []

    def other():
        print("from another thread")

    with capture_output(sink):
        print("captured line")
        t = threading.Thread(target=other)
        t.start()
        t.join()
        sys.stderr.write("captured err\n")
    print("after")
    out = capsys.readouterr()
    assert "".join(sink) == "captured line\ncaptured err\n"
    assert "from another thread" in out.out and "after" in out.out and "captured line" not in out.out
    assert not seen_elsewhere


def test_safe_reward_log_per_call_in_worker_thread_and_inline():
    for timeout in (30.0, None):
        r = SafeReward("noisy", noisy, timeout_s=timeout)
        r.capture = True
        assert r(["p"] * 2, ["a", "b"]) == [1.0, 1.0]
        r(["p"], ["c"])
        log = r.pop_log()
        assert log["calls"] == 2 and log["errors"] == 0 and log["ms"] >= 0
        assert log["output"].count("scored") == 2 and "[WARNING user.reward] slow API x" in log["output"]
        assert r.pop_log() is None  # popped


def test_failures_carry_their_traceback_and_unscored_count():
    def broken(prompts, completions, **kw):
        print("about to fail")
        raise KeyError("missing field")

    r = SafeReward("broken", broken)
    r.capture = True
    assert r(["p"] * 3, ["a", "b", "c"]) == [None] * 3
    log = r.pop_log()
    assert log["errors"] == 3 and "about to fail" in log["output"]
    assert "KeyError" in log["error"] and "Traceback" in log["error"] and "raise KeyError" in log["error"]


def test_capture_off_leaves_prints_on_the_console(capsys):
    r = SafeReward("noisy", noisy, timeout_s=None)  # off unless a stage writes reward_logs.jsonl
    r(["p"], ["a"])
    assert "scored 1" in capsys.readouterr().out and r.pop_log() is None  # nothing kept


def test_suite_rows_and_writer(tmp_path):
    suite = RewardSuite([SafeReward("noisy", noisy), SafeReward("quiet", lambda p, c, **k: [0.5] * len(c))])
    suite.capture_logs(True)
    suite.score(["p", "p"], ["a", "b"], {})
    rows = suite.pop_logs()
    assert [r["reward"] for r in rows] == ["noisy", "quiet"] and rows[1]["output"] == ""
    path = tmp_path / "reward_logs.jsonl"
    RewardLog(path).write(7, rows + [{"reward": "big", "calls": 1, "ms": 1.0, "errors": 0, "output": "x" * 30000}])
    written = [json.loads(line) for line in path.read_text().splitlines()]
    assert [w["step"] for w in written] == [7, 7, 7] and written[0]["calls"] == 1
    assert len(written[2]["output"]) < 20100 and "more characters" in written[2]["output"]
    assert RewardLog(None).write(1, rows) == 0


def _chatty_rows(tmp_path, stage, *overrides):
    """Train `stage`'s demo with the chatty reward added at weight 0; its reward_logs.jsonl rows."""
    from conftest import ROOT, read_jsonl, run_cli

    cfg = tmp_path / "chatty.yaml"
    cfg.write_text(f"rewards:\n  - fn: char_fraction\n  - fn: {ROOT / 'tests/fixtures/chatty_reward.py'}:chatty\n"
                   "    weight: 0.0\n")
    out = tmp_path / "run"
    res = run_cli("train", "--stage", stage, "--hw", "cpu", "-c", f"configs/examples/{stage}_demo.yaml", "-c", cfg,
                  f"train.output_dir={out}", "data.eval_prompts=0", *overrides)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "chatty call" not in res.stdout + res.stderr  # captured, not printed
    rows = [r for r in read_jsonl(out / "reward_logs.jsonl") if r["reward"] == "chatty"]
    assert rows[0]["output"].startswith("chatty call 1: scoring")
    assert "ValueError: chatty fails on call 3" in rows[2]["error"] and rows[2]["errors"] > 0
    return rows


@pytest.mark.e2e
def test_rs_sft_sampling_writes_reward_logs(tmp_path):
    rows = _chatty_rows(tmp_path, "rs_sft", "rs_sft.rounds=1")
    assert all(r["round"] == 1 and r["step"] == 0 and r["calls"] == 1 for r in rows)


@pytest.mark.e2e
def test_ppo_writes_reward_logs_per_update(tmp_path):
    rows = _chatty_rows(tmp_path, "ppo", "ppo.num_episodes=48")
    assert [r["step"] for r in rows] == [1, 2, 3]  # one row per update (16 episodes each)
