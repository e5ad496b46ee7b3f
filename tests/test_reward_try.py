"""`rlft rewards try` without training: hand-written completions and a run folder written by hand, scored
through the CLI; the statistics and the verdict of rlft.rewards.trial on worked numbers."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, read_jsonl, run_cli
from rlft.rewards.trial import Trial, compare, reward_stats

REWARDS = """
def const(prompts, completions, **kw):
    return [1.0] * len(completions)

def boom(prompts, completions, **kw):
    return [len(c) / 0 for c in completions]

def has_answer(prompts, completions, answer, **kw):
    print("scoring", len(completions))
    return [1.0 if a in c else 0.0 for c, a in zip(completions, answer)]
"""
ROWS = [{"row": {"prompt": "2+2?", "answer": "4"}, "completion": "4"},
        {"row": {"prompt": "2+2?", "answer": "4"}, "completion": "five"},
        {"row": {"prompt": "3+3?", "answer": "6"}, "completion": "6"},
        {"row": {"prompt": "3+3?", "answer": "6"}, "completion": "6!"},
        {"prompt": "say hi", "completion": "hi", "row": {"answer": "hi"}}]


def _setup(tmp_path, rewards):
    (tmp_path / "rw.py").write_text(REWARDS)
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("rewards:\n" + "".join(f"  - {{fn: rw.py:{fn}, weight: {w}}}\n" for fn, w in rewards))
    data = tmp_path / "hand.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return cfg, data


def _try(tmp_path, *args):
    return run_cli("rewards", "try", *args, cwd=tmp_path)


def written(res, cwd):
    """The rows file a `rewards try` said it wrote (by default a new runs/rewards-try-<time>/ folder)."""
    line = next(x for x in res.stdout.splitlines() if x.startswith("scored rows written to "))
    return cwd / line.removeprefix("scored rows written to ").split(" (browse")[0]


def test_completions_file_scored_with_weights_and_columns(tmp_path):
    cfg, data = _setup(tmp_path, [("has_answer", 2.0)])
    res = _try(tmp_path, "-c", cfg, "--completions", data)
    assert res.returncode == 0, res.stderr
    rows = read_jsonl(written(res, tmp_path))  # the default -o: a new folder under runs/, nothing else here
    assert written(res, tmp_path).parent.parent == tmp_path / "runs"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cfg.yaml", "hand.jsonl", "runs", "rw.py"]
    assert [r["rewards"]["has_answer"] for r in rows] == [1.0, 0.0, 1.0, 1.0, 1.0]
    assert [r["total"] for r in rows] == [2.0, 0.0, 2.0, 2.0, 2.0]
    assert [r["prompt_id"] for r in rows] == [0, 0, 1, 1, 2] and rows[0]["prompt"] == "2+2?"
    out = res.stdout
    assert "5 completions of 3 prompts" in out
    line = next(x for x in out.splitlines() if x.startswith("has_answer"))
    assert line.split()[:7] == ["has_answer", "2", "0.8", "0.4", "0", "1", "0/5"]
    assert line.endswith("1 of 2")  # 3+3? scored 1 and 1: no signal; 2+2? has some; say hi has one sample
    assert "printed (first call):" in out and "scoring 2" in out
    assert "verdict [ok]: signal on 1 of 2 prompts, no failures" in out
    shown = written(res, tmp_path).relative_to(tmp_path)
    assert f"(browse them: rlft report {shown})" in out
    report = run_cli("report", str(shown), cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    assert "5 completions" in report.stdout
    assert (tmp_path / shown.parent / "rewards_try-report" / "index.html").is_file()
    # a second call by default: a folder of its own, the first one's rows untouched
    second = _try(tmp_path, "-c", cfg, "--completions", data)
    assert second.returncode == 0 and written(second, tmp_path).parent != written(res, tmp_path).parent
    # a named output is refused a second time unless --force
    assert _try(tmp_path, "-c", cfg, "--completions", data, "-o", "x.jsonl").returncode == 0
    again = _try(tmp_path, "-c", cfg, "--completions", data, "-o", "x.jsonl")
    assert again.returncode == 2 and "--force" in again.stderr and len(again.stderr.strip().splitlines()) == 1
    assert _try(tmp_path, "-c", cfg, "--completions", data, "-o", "x.jsonl", "--force").returncode == 0


def test_constant_reward_has_no_signal_and_strict_fails(tmp_path):
    cfg, data = _setup(tmp_path, [("const", 1.0), ("has_answer", 1.0)])
    res = _try(tmp_path, "-c", cfg, "--completions", data)
    assert res.returncode == 0, res.stderr
    assert next(x for x in res.stdout.splitlines() if x.startswith("const")).endswith("2 of 2")
    assert "verdict [warning]: reward 'const' gives every completion 1: it carries no signal" in res.stdout
    strict = _try(tmp_path, "-c", cfg, "--completions", data, "-o", "s.jsonl", "--strict")
    assert strict.returncode == 4 and "--strict: reward 'const' has no signal" in strict.stdout


def test_raising_reward_reported_with_traceback_exit_0_unless_strict(tmp_path):
    cfg, data = _setup(tmp_path, [("boom", 0.5), ("has_answer", 1.0)])
    res = _try(tmp_path, "-c", cfg, "--completions", data)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert next(x for x in out.splitlines() if x.startswith("boom")).split()[6] == "5/5"
    assert "reward 'boom': first error:" in out and "raised ZeroDivisionError" in out
    assert "Traceback (most recent call last):" in out and "rw.py\", line 6, in " in out
    assert "verdict [critical]: reward 'boom' failed on 5 of 5 completions (100% without a total, above " \
           "monitor.max_reward_failure_fraction=0.5: training would stop)" in out
    rows = read_jsonl(written(res, tmp_path))
    assert all(r["rewards"]["boom"] is None and r["total"] is None for r in rows)
    assert "Traceback" not in res.stderr  # reported once, in the report
    strict = _try(tmp_path, "-c", cfg, "--completions", data, "-o", "s.jsonl", "--strict")
    assert strict.returncode == 4 and "reward 'boom' failed on 5 of 5 completions" in strict.stdout


def _hand_run(tmp_path, logged_total=None):
    """A run folder as GRPO leaves it, written by hand: config.yaml (demo data) and completions.jsonl."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("stage: grpo\nmodel: {name_or_path: tiny}\ndata: {train: demo}\n"
                                     "rewards: [{fn: char_fraction, weight: 2.0}]\n")
    rows = [{"step": 1, "prompt_id": 3, "prompt": "Repeat the letter z: ", "completion": c,
             "rewards": {"char_fraction": s}, "total": 2 * s if logged_total is None else logged_total}
            for c, s in (("zzzz", 1.0), ("zzab", 0.5), ("abc", 0.0))]
    (run / "completions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def test_from_run_takes_data_columns_from_the_run_and_compares(tmp_path):
    run = _hand_run(tmp_path)
    with open(run / "completions.jsonl", "a") as f:
        f.write('{"step": 2, "prompt_id": 3, "prom')  # the run is still writing this row: left out
    res = _try(tmp_path, "--from-run", run)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert "compared with the logged scores (3 completions):" in lines
    total_row = lines[lines.index("compared with the logged scores (3 completions):") + 3]
    assert total_row.split() == ["total", "(weighted)", "1", "1", "0", "of", "3"]  # logged, now, changed
    assert [r["total"] for r in read_jsonl(written(res, tmp_path))] == [2.0, 1.0, 0.0]
    assert not (run / ".rlft-eval-config.yaml").exists()  # the config layer written beside the run is gone
    # -c layers over the run's config: here a changed weight changes every scored total
    cfg = tmp_path / "w.yaml"
    cfg.write_text("rewards: [{fn: char_fraction, weight: 1.0}]\n")
    res = _try(tmp_path, "--from-run", run, "-c", cfg, "-o", "b.jsonl")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[-3].split()[2:] == ["1", "0.5", "2", "of", "3", "(largest", "1)"]


@pytest.mark.parametrize("args, message", [
    (["--from-run", "missing"], "--from-run missing: no such run folder"),
    (["--completions", "bad.jsonl"], "bad.jsonl:2: not valid JSON"),
    (["--completions", "noprompt.jsonl"], "noprompt.jsonl:1: no prompt"),
    ([], "give one source of completions"),
    (["--completions", "bad.jsonl", "--sample", "2"], "(got --completions and --sample)"),
])
def test_bad_input_one_line_exit_2(tmp_path, args, message):
    (tmp_path / "bad.jsonl").write_text('{"prompt": "a", "completion": "b"}\n{"prompt": \n')
    (tmp_path / "noprompt.jsonl").write_text('{"completion": "b"}\n')
    (tmp_path / "cfg.yaml").write_text("rewards: [{fn: char_fraction, kwargs: {char: a}}]\n")
    res = _try(tmp_path, "-c", "cfg.yaml", *args)
    assert res.returncode == 2
    errors = [x for x in res.stderr.splitlines() if not x.startswith("warning:")]
    assert len(errors) == 1 and message in errors[0], res.stderr


def test_run_whose_data_lost_the_prompt_is_bad_input(tmp_path):
    run = _hand_run(tmp_path)
    rows = read_jsonl(run / "completions.jsonl")
    rows[1]["prompt_id"] = 999
    (run / "completions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = _try(tmp_path, "--from-run", run)
    assert res.returncode == 2 and "completions.jsonl:2: prompt_id 999 is not a row of data.train" in res.stderr


def test_scoring_without_sampling_imports_no_torch(tmp_path):
    """--completions and --from-run score through rlft.rollout.score, which must not load torch with the
    sampler; the package's `sample` stays the function when its submodule is imported first."""
    code = ("import sys, rlft.rollout.score, rlft.rollout.log, rlft.commands.reward_try\n"
            "assert 'torch' not in sys.modules, 'torch'\n"
            "import rlft.rollout.episodes, rlft.rollout\n"
            "assert callable(rlft.rollout.sample) and callable(rlft.rollout.evaluate), rlft.rollout.sample\n"
            "from rlft.rollout import SamplingParams, sample, score, evaluate\n"
            "assert sample.__module__ == 'rlft.rollout.sample' and score.__module__ == 'rlft.rollout.score'\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]


# -- statistics on worked numbers -------------------------------------------------------------------
def test_reward_stats_worked_numbers():
    s = reward_stats("r", [1.0, 0.0, None, 0.5, 0.5], ["a", "a", "a", "b", "b"], [1.0, 3.0], ["", "boom"])
    assert (s.mean, s.min, s.max, s.failures, s.completions) == (0.5, 0.0, 1.0, 1, 5)
    assert s.std == pytest.approx((0.125) ** 0.5)
    assert (s.prompts, s.flat_prompts, s.first_error) == (2, 1, "boom")
    assert s.ms_mean == 2.0 and s.ms_p95 == pytest.approx(2.9)
    assert not s.no_signal and s.constant is None


def test_verdict_levels():
    ok = reward_stats("r", [1.0, 0.0, 1.0, 0.0], ["a", "a", "b", "b"])
    assert Trial([ok], ok).verdict() == "verdict [ok]: signal on 2 of 2 prompts, no failures"
    coarse = reward_stats("r", [1.0, 1.0, 0.0, 0.0, 1.0, 0.0], ["a", "a", "b", "b", "c", "c"])
    assert Trial([coarse], coarse).verdict() == ("verdict [warning]: no signal on 2 of 3 prompts: the reward is too "
                                                 "coarse or the task too hard/easy")
    assert Trial([coarse], coarse).problems() == []
    single = reward_stats("r", [1.0, 0.0], ["a", "b"])
    assert "signal was not measured" in Trial([single], single).verdict()


def test_compare_counts_changes_beyond_float32_rounding():
    lines = compare(["r"], {"r": [0.3333333, 1.0, None]}, [0.6666666, 2.0, None],
                    [{"r": 0.333333}, {"r": 0.5}, {"r": 0.0}], [0.666667, 1.0, 0.0])
    assert lines[2].endswith("2 of 3 (largest 0.5)")  # 0.3333333 against a logged 0.333333 is no change
    assert lines[3].endswith("2 of 3 (largest 1)")


# -- hostile input (issue 35) -----------------------------------------------------------------------------------
@pytest.mark.parametrize("field, value, message", [
    ("prompt_id", [3], "`prompt_id` is a list, not an integer or a string"),
    ("step", [1], "`step` is a list, not an integer"),
    ("step", True, "`step` is a boolean, not an integer"),
    ("total", "2.0", "`total` is a string, not a number or null"),
    ("rewards", [1.0], "`rewards` is a list, not an object of scores"),
    ("rewards", {"char_fraction": {"a": 1}}, "`rewards.char_fraction` is an object, not a number or null"),
    ("prompt", 5, "`prompt` is int, not text or chat messages"),
])
def test_a_damaged_logged_row_is_named_not_a_traceback(tmp_path, field, value, message):
    """A list where a prompt id or step belongs, a string total: one line naming the file, the row and the field."""
    run = _hand_run(tmp_path)
    rows = read_jsonl(run / "completions.jsonl")
    rows[1][field] = value
    (run / "completions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = _try(tmp_path, "--from-run", run)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-2000:]
    errors = [x for x in res.stderr.splitlines() if not x.startswith("warning:")]
    assert len(errors) == 1 and f"completions.jsonl:2: {message}" in errors[0], res.stderr
    assert not (tmp_path / "rewards_try.jsonl").exists() and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("row, message", [
    ({"prompt": "a", "completion": "b", "step": [0]}, "hand.jsonl:2: `step` is a list, not an integer"),
    ({"prompt": "a", "completion": "b", "prompt_id": {"x": 1}}, "hand.jsonl:2: `prompt_id` is an object"),
    ({"row": {"prompt": "a", "prompt_id": [1]}, "completion": "b"}, "hand.jsonl:2: `prompt_id` is a list"),
    ({"prompt": "a", "completion": "b", "rewards": {"r": 1}, "total": [1]}, "hand.jsonl:2: `total` is a list"),
])
def test_a_damaged_hand_written_row_is_named(tmp_path, row, message):
    (tmp_path / "cfg.yaml").write_text("rewards: [{fn: char_fraction, kwargs: {char: a}}]\n")
    (tmp_path / "hand.jsonl").write_text(json.dumps({"prompt": "a", "completion": "b"}) + "\n" + json.dumps(row) + "\n")
    res = _try(tmp_path, "-c", "cfg.yaml", "--completions", "hand.jsonl")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-2000:]
    errors = [x for x in res.stderr.splitlines() if not x.startswith("warning:")]
    assert len(errors) == 1 and message in errors[0], res.stderr


def test_sample_is_bounded_before_anything_loads(tmp_path):
    """`--sample 1000000000000` loaded the model, then asked for room for 10**12 completions per prompt."""
    from rlft.commands.reward_try import TryError, check_sources

    with pytest.raises(TryError, match=r"^--sample 1000000000000 is out of range; expected an integer between 1 and "
                                       r"256$"):
        check_sources(None, None, 10**12, tmp_path / "o.jsonl", False)
    with pytest.raises(TryError, match=r"^--max-prompts 100000 is out of range; expected an integer between 1 and "):
        check_sources(None, None, 4, tmp_path / "o.jsonl", False, 100000)
    check_sources(None, None, 256, tmp_path / "o.jsonl", False, 8)  # the largest allowed
    # through the CLI: refused before the config is even read (its model folder does not exist)
    (tmp_path / "cfg.yaml").write_text("model: {name_or_path: ./no-such-model}\nrewards: [{fn: char_fraction}]\n")
    res = _try(tmp_path, "-c", "cfg.yaml", "--sample", "1000000000000")
    assert res.returncode == 2 and res.stderr.strip() == ("error: --sample 1000000000000 is out of range; expected an "
                                                          "integer between 1 and 256"), res.stderr


CHDIR = """
import os

def wander(prompts, completions, **kw):
    os.chdir(os.environ["RLFT_TEST_ELSEWHERE"])
    return [1.0] * len(completions)
"""


def test_a_reward_that_changes_directory_does_not_move_the_output(tmp_path):
    """A relative -o is the file in the folder the command was given in, whatever a reward's code does: a reward that
    chdirs into a folder holding a file of that name must not get it replaced without --force."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "out.jsonl").write_text("precious\n")
    (tmp_path / "rw.py").write_text(CHDIR)
    (tmp_path / "cfg.yaml").write_text("rewards: [{fn: rw.py:wander}]\n")
    (tmp_path / "hand.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    res = run_cli("rewards", "try", "-c", "cfg.yaml", "--completions", "hand.jsonl", "-o", "out.jsonl", cwd=tmp_path,
                  env={"RLFT_TEST_ELSEWHERE": str(elsewhere)})
    assert res.returncode == 0, res.stderr[-2000:]
    assert (elsewhere / "out.jsonl").read_text() == "precious\n"
    assert len(read_jsonl(tmp_path / "out.jsonl")) == len(ROWS)
    assert "scored rows written to out.jsonl" in res.stdout


@pytest.mark.parametrize("target_exists", [True, False])
def test_from_run_does_not_write_through_a_link_planted_in_the_run(tmp_path, target_exists):
    """The run's config layer goes beside its config.yaml; a link planted under that name pointing outside the run
    is refused, and what it points to is left as it was (or not created)."""
    run = _hand_run(tmp_path)
    outside = tmp_path / "outside.yaml"
    if target_exists:
        outside.write_text("precious\n")
    (run / ".rlft-eval-config.yaml").symlink_to(outside)
    res = _try(tmp_path, "--from-run", run)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-2000:]
    errors = [x for x in res.stderr.splitlines() if not x.startswith("warning:")]
    assert len(errors) == 1 and "is a symbolic link" in errors[0] and ".rlft-eval-config.yaml" in errors[0]
    assert (outside.read_text() == "precious\n") if target_exists else not outside.exists()
    assert (run / ".rlft-eval-config.yaml").is_symlink()  # not ours to remove
    assert sorted(p.name for p in run.iterdir()) == [".rlft-eval-config.yaml", "completions.jsonl", "config.yaml"]


def test_config_layer_replaces_a_hard_link_instead_of_writing_through_it(tmp_path):
    from rlft.posttrain.config_layer import eval_config_file

    run = _hand_run(tmp_path)
    outside = tmp_path / "outside.yaml"
    outside.write_text("precious\n")
    os.link(outside, run / ".rlft-eval-config.yaml")
    path = eval_config_file(run, "grpo")
    assert outside.read_text() == "precious\n" and "rewards:" in path.read_text()
    assert sorted(p.name for p in run.iterdir()) == [".rlft-eval-config.yaml", "completions.jsonl", "config.yaml"]


def test_config_layer_keeps_escaped_interpolations_as_text(tmp_path):
    """A `\\${..}` the user escaped is `${..}` in the run's resolved config.yaml: eval/rewards try must read it back
    as that text, not interpolate it (a missing key error, or another key's value); reward kwargs stay verbatim."""
    from rlft.config.compose import compose
    from rlft.posttrain.config_layer import eval_config_file

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(
        "stage: grpo\nmodel: {name_or_path: tiny}\n"
        "data: {train: demo, system_prompt: 'Costs ${data.train} dollars, ${nothing}'}\n"
        "rewards: [{fn: regex_match, kwargs: {pattern: 'a ${x} b'}}]\n")
    composed = compose("grpo", "cpu", [eval_config_file(run, "grpo")])
    assert composed.data["data"]["system_prompt"] == "Costs ${data.train} dollars, ${nothing}"
    assert composed.data["rewards"][0]["kwargs"] == {"pattern": "a ${x} b"}


def test_table_columns_stay_apart_after_a_slow_call():
    """A reward call of 30 s (3.004e+04 ms) once ran into the failed column: `1/13.004e+043.004e+04`."""
    slow = reward_stats("slow_judge", [1.0], [0], call_ms=[30040.0], weight=1.0)
    trial = Trial([slow], reward_stats("total", [1.0], [0], [30040.0]))
    head, row, total = trial.table()
    assert row.split()[:9] == ["slow_judge", "1", "1", "0", "1", "1", "0/1", "3.004e+04", "3.004e+04"], row
    assert "1/13.004e" not in row and "0/13.004e" not in row
    for line in (row, total):  # every column right-aligned under its heading
        assert line.index("3.004e+04") + len("3.004e+04") == head.index("ms/call") + len("ms/call")
