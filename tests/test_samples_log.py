"""samples.jsonl bookkeeping of RS-SFT / AWR: resume after the last complete prompt, a cut line,
the decision rewrite."""

import json

from rlft.stages.common.samples_log import SamplesLog


def _rows(round_, pid, n=2, total=0.5):
    return [{"round": round_, "prompt_id": pid, "sample": g, "prompt": f"p{pid}", "completion": f"c{g}",
             "rewards": {"r": total}, "total": total} for g in range(n)]


def test_resume_point_skips_incomplete_prompt_and_cut_line(tmp_path):
    log = SamplesLog(tmp_path / "samples.jsonl", samples_per_prompt=2)
    log.append(_rows(1, 0) + _rows(1, 1))
    log.append(_rows(1, 2)[:1])  # killed after one sample of prompt 2
    with open(log.path, "a") as f:
        f.write('{"round": 1, "prompt_id": 2, "sam')  # and in the middle of a line
    assert log.prompts_done(1) == 2
    assert log.start_round(1) == 2
    rows = [json.loads(x) for x in log.path.read_text().splitlines()]
    assert [(r["prompt_id"], r["sample"]) for r in rows] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    log.append(_rows(1, 2))
    assert log.prompts_done(1) == 3 and not log.decided(1)


def test_decide_marks_round_and_keeps_other_rounds(tmp_path):
    log = SamplesLog(tmp_path / "samples.jsonl", samples_per_prompt=2)
    log.append(_rows(1, 0) + _rows(1, 1))
    rows = log.round_rows(1)
    log.decide(1, [{**r, "kept": r["sample"] == 0} for r in rows])
    assert log.decided(1)
    log.start_round(2)
    log.append(_rows(2, 0, total=0.9))
    assert log.decided(1) and not log.decided(2)
    assert [r["kept"] for r in log.round_rows(1)] == [True, False, True, False]
    assert [r["total"] for r in log.round_rows(2)] == [0.9, 0.9]


def test_duplicate_prompt_last_copy_wins(tmp_path):
    log = SamplesLog(tmp_path / "samples.jsonl", samples_per_prompt=2)
    log.append(_rows(1, 0, total=0.1))
    log.append(_rows(1, 0, total=0.7))
    assert [r["total"] for r in log.round_rows(1)] == [0.7, 0.7]
    assert log.prompts_done(1) == 1


def test_damaged_rows_drop_like_a_cut_line(tmp_path):
    """Rows of the wrong shape (not an object, a missing or non-integer id, a text total) are skipped on reading:
    their prompt counts as unsampled and is sampled again, never a KeyError or TypeError."""
    log = SamplesLog(tmp_path / "samples.jsonl", samples_per_prompt=2)
    log.append(_rows(1, 0) + _rows(1, 1))
    bad = _rows(1, 2)
    with open(log.path, "a") as f:
        for row in ([1, 2], {**bad[0], "prompt_id": "2"}, {**bad[1], "total": "high"}, {"round": 1}, "text", None):
            f.write(json.dumps(row) + "\n")
    assert log.prompts_done(1) == 2 and len(log.round_rows(1)) == 4


def test_rounds_state_problem_names_what_is_wrong():
    from rlft.runtime.rounds_state import rounds_state_problem

    assert rounds_state_problem({}) is None
    assert rounds_state_problem({"eval_start": {"reward_mean": 0.1}, "round_steps": {"1": 3, "2": 0}}) is None
    assert "not an object" in rounds_state_problem([1])
    assert "eval_start" in rounds_state_problem({"eval_start": 0.5})
    # the resumed run's eval line reads the start's mean reward
    assert rounds_state_problem({"eval_start": {}}) == "has an eval_start that has no reward_mean"
    assert rounds_state_problem({"eval_start": {"reward_mean": "high"}}) == (
        "has an eval_start whose reward_mean is a string, not a number")
    for steps in ({"1": "3"}, {"one": 3}, {"1": -1}, {"1": True}, [3]):
        assert "round_steps" in rounds_state_problem({"round_steps": steps}), steps
