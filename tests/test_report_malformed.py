"""`rlft report` on run files with rows of the wrong shape: every reader skips and counts them (the note
says how many of which file), the rest of the run still makes a page, nothing crashes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import run_cli
from rlft.monitor.report import load_run
from rlft.monitor.report.graphs import plan_graphs
from rlft.monitor.report.html import build_html
from test_report import _page_data, make_grpo_run

GOOD = {"metrics.jsonl": 30, "completions.jsonl": 30 * 3 // 2 * 4, "health.jsonl": 3, "reward_logs.jsonl": 30}

# (file, lines appended to it): each line one malformed row
BAD_ROWS = {
    "completions.jsonl": [
        {"step": 2, "prompt_id": 0, "completion": "c", "rewards": [0.1, 0.2], "total": 0.3},   # rewards a list
        {"step": 2, "prompt_id": 0, "completion": "c", "rewards": {"fmt": "high"}, "total": 0.3},
        {"step": 2, "prompt_id": 0, "completion": "c", "rewards": {"fmt": 0.5}, "total": "0.3"},
        {"step": 2, "prompt_id": 0, "completion": "c", "rewards": {}, "completion_tokens": "12"},
        {"step": "2", "prompt_id": 0, "completion": "c", "rewards": {}},
        {"step": 2, "prompt_id": [0], "completion": "c", "rewards": {}},
        {"step": 2, "prompt_id": 0, "completion": 7, "rewards": {}},
        {"step": 2, "prompt_id": 0, "completion": "c", "advantage": {"a": 1}},
        {"step": float("inf"), "prompt_id": 0, "completion": "c"},
        [1, 2], "a string", 3, None,
    ],
    "metrics.jsonl": [
        [1, 2, 3], "step 4",
        {"step": 4, "loss": "0.5", "reward": 0.1},                               # a number written as text
        {"step": "4", "reward": 0.1},
        {"reward": 0.1},                                                         # no step
        {"step": 4, "reward": {"mean": 0.1}},
        {"step": 4, "reward": [0.1]},
    ],
    "health.jsonl": [
        {"step": 5, "rule": "kl_high", "level": ["warning"], "action": "warn"},  # unhashable level
        {"step": "5", "rule": "kl_high", "level": "warning"},
        {"step": 5, "rule": "kl_high", "level": "warning", "value": "high"},
        {"step": 5, "rule": {"name": "x"}, "level": "critical"},
        ["step", 5],
    ],
    "reward_logs.jsonl": [
        {"step": 6, "reward": "answer", "calls": "many", "ms": 1.0},
        {"step": 6, "reward": "answer", "calls": 1, "ms": float("nan")},
        {"step": 6, "reward": "answer", "calls": 1, "errors": [1]},
        {"step": 6, "reward": {"name": "answer"}, "calls": 1},
        {"step": 6, "reward": "answer", "output": 42},
        17,
    ],
}
SUMMARIES = {  # summary.json text -> what the note says
    "[1, 2]": "summary.json is a list, not an object: ignored",
    '"finished"': "summary.json is a string, not an object: ignored",
    "3": "summary.json is a number or true/false, not an object: ignored",
    "null": "summary.json is null, not an object: ignored",
    '{"status": ': "summary.json is not valid JSON: ignored",
    json.dumps({"stage": ["grpo"], "status": "finished", "steps": "many", "headline": "reward", "reward": [1],
                "best_checkpoint": "final", "eval": {"start": 0.1, "end": {"reward_mean": 0.5}}}):
        "summary.json: 6 field(s) of the wrong kind ignored (stage, steps, headline, reward, best_checkpoint, "
        "eval.start)",
}


@pytest.fixture(scope="module")
def good_run(tmp_path_factory) -> Path:
    return make_grpo_run(tmp_path_factory.mktemp("good") / "run")


def _copy(good_run: Path, tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(good_run, run)
    return run


def _append(path: Path, rows: list, extra_text: str = "") -> None:
    text = path.read_text()
    text = text[:text.rfind("\n") + 1]  # the synthetic metrics end with a torn line: keep rows whole
    path.write_text(text + "".join(json.dumps(r) + "\n" for r in rows) + extra_text)


def _page(run: Path) -> tuple[str, list]:
    """The page (graphs planned, not drawn: drawing is the slow part and reads the same rows) and the run's notes."""
    loaded = load_run(run)
    page = build_html([loaded], plan_graphs([loaded]))
    assert _page_data(page)["runs"][0]["name"] == "run"  # valid JSON: no NaN, nothing cut
    return page, loaded.problems


@pytest.mark.parametrize("name", sorted(BAD_ROWS))
def test_each_malformed_row_is_skipped_and_counted(good_run, tmp_path, name):
    run = _copy(good_run, tmp_path)
    for i, row in enumerate(BAD_ROWS[name]):  # one more each time
        _append(run / name, [row])
        page, problems = _page(run)
        assert problems == [f"skipped {i + 1} malformed row(s) of {name}"], (row, problems)
        assert f"Left out as malformed: run: skipped {i + 1} malformed row(s) of {name}." in page
    loaded = load_run(run)
    kept = {"metrics.jsonl": len(loaded.metrics), "completions.jsonl": len(loaded.completions),
            "health.jsonl": len(loaded.health), "reward_logs.jsonl": len(loaded.reward_logs)}
    assert kept == GOOD  # every good row is still read


def test_a_line_that_is_not_json_counts_but_a_torn_last_line_does_not(good_run, tmp_path):
    run = _copy(good_run, tmp_path)
    _append(run / "completions.jsonl", [], '{"step": 1, "prompt_id": 0, "comp\n')  # mid-file after a later append
    _append(run / "completions.jsonl", [{"step": 9, "prompt_id": 1, "completion": "ok", "rewards": {}}],
            '{"step": 10, "prompt_id": 1, "compl')  # still being written
    # the synthetic metrics.jsonl ends with a torn line too: not counted
    assert _page(run)[1] == ["skipped 1 malformed row(s) of completions.jsonl"]
    assert len(load_run(run).completions) == GOOD["completions.jsonl"] + 1


@pytest.mark.parametrize("text", list(SUMMARIES), ids=range(len(SUMMARIES)))
def test_summary_of_the_wrong_shape_is_ignored_and_said(good_run, tmp_path, text):
    run = _copy(good_run, tmp_path)
    (run / "summary.json").write_text(text)
    page, problems = _page(run)
    assert problems == [SUMMARIES[text]]
    assert f"Left out as malformed: run: {SUMMARIES[text]}" in page
    loaded = load_run(run)
    assert loaded.stage == "unknown" and len(loaded.metrics) == 30  # the rest of the run is read as before


def test_nan_reward_version_draws_no_version_line(good_run, tmp_path):
    run = _copy(good_run, tmp_path)
    _append(run / "metrics.jsonl", [{"step": 31, "reward": 0.5, "reward_version": float("nan")}])
    page, problems = _page(run)
    assert problems == []  # NaN is a number: not malformed, just never a version change
    assert _page_data(page)["runs"][0]["versions"] == [[20, 2]]


def test_cli_report_on_every_kind_of_damage_at_once(good_run, tmp_path):
    run = _copy(good_run, tmp_path)
    for name, rows in BAD_ROWS.items():
        _append(run / name, rows)
    (run / "summary.json").write_text("[]")
    res = run_cli("report", run, "-o", tmp_path / "out")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Traceback" not in res.stderr and "report written to" in res.stdout
    (note,) = [line for line in res.stderr.splitlines() if line.startswith("rlft report: ")]
    for name, rows in BAD_ROWS.items():
        assert f"skipped {len(rows)} malformed row(s) of {name}" in note, note
    assert "summary.json is a list, not an object: ignored" in note
