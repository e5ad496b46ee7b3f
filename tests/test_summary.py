"""summary.json: status per exit code, the last training row of metrics.jsonl, atomic write; the headline
numbers, best checkpoint and the end-of-train table (worked numbers)."""

import io
import json

import pytest

from rlft.monitor.summary import (best_checkpoint, headline, last_metrics, print_summary, run_numbers, status_for,
                                  summary_lines, write_summary)


def test_status_for_exit_codes():
    assert [status_for(c) for c in (0, 3, 4, 130, 143, 1, 2, None)] == [
        "finished", "stopped", "stopped", "interrupted", "interrupted", "failed", "failed", "failed"]


def test_last_metrics_skips_eval_rows_and_a_cut_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "time": 1.0, "reward": 0.1}\n{"step": 2, "time": 2.0, "reward": 0.5}\n'
                    '{"step": 2, "eval_loss": 3.0}\n{"step": 3, "rew')
    assert last_metrics(path) == {"reward": 0.5}
    assert last_metrics(tmp_path / "missing.jsonl") == {}


def test_write_summary_round_trips(tmp_path):
    path = tmp_path / "summary.json"
    written = write_summary(path, stage="grpo", status="finished", steps=7, wall_s=1.23456, last={"reward": 0.5},
                            eval={"start": {"reward_mean": 0.1, "n": 4}}, exit_code=0)
    assert json.loads(path.read_text()) == written
    assert written["wall_s"] == 1.235 and written["eval"]["start"]["n"] == 4
    assert not (tmp_path / "summary.json.tmp").exists()


def _metrics(tmp_path, rows):
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 9')


def test_headline_first_and_last_window():
    rows = [{"step": s, "reward": float(s)} for s in range(1, 31)]
    h = headline(rows)
    assert h == {"metric": "reward", "higher_is_better": True, "window": 10, "first_mean": 5.5, "last_mean": 25.5}
    short = headline([{"step": 1, "reward": 1.0}, {"step": 2, "reward": 3.0}, {"step": 3, "reward": None}])
    assert short["window"] == 1 and short["first_mean"] == 1.0 and short["last_mean"] == 3.0


def test_headline_for_preference_and_loss_only_runs():
    assert headline([{"step": 1, "loss": 1.0, "rewards/margins": 0.5}])["metric"] == "rewards/margins"
    h = headline([{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.0}])
    assert h["metric"] == "loss" and h["higher_is_better"] is False
    assert headline([{"step": 1}]) is None


def test_best_checkpoint_scores_the_window_before_each_save(tmp_path):
    # reward rises to step 20, then collapses: checkpoint-20 is the best, not the last one
    rows = [{"step": s, "reward": s / 20 if s <= 20 else 0.1} for s in range(1, 41)]
    cands = [(10, tmp_path / "checkpoint-10"), (20, tmp_path / "checkpoint-20"), (40, tmp_path / "final")]
    best = best_checkpoint(rows, cands, headline(rows))
    assert best["step"] == 20 and best["path"].endswith("checkpoint-20")
    assert best["value"] == pytest.approx(sum(s / 20 for s in range(11, 21)) / 10)
    loss_rows = [{"step": s, "loss": 1.0 / s} for s in range(1, 21)]  # lower is better: the last one
    assert best_checkpoint(loss_rows, cands[:2], headline(loss_rows))["step"] == 20
    assert best_checkpoint(rows, [], headline(rows)) is None


def test_run_numbers_and_the_table(tmp_path):
    _metrics(tmp_path, [{"step": s, "reward": s / 20, "loss": 0.5} for s in range(1, 21)])
    nums = run_numbers(tmp_path, [(10, tmp_path / "checkpoints" / "checkpoint-10"), (20, tmp_path / "final")])
    s = write_summary(tmp_path / "summary.json", stage="grpo", status="finished", steps=20, wall_s=12.345,
                      last=last_metrics(tmp_path / "metrics.jsonl"), max_steps=20,
                      eval={"start": {"reward_mean": 0.1, "n": 8}, "end": {"reward_mean": 0.8, "n": 8}}, **nums)
    assert json.loads((tmp_path / "summary.json").read_text()) == json.loads(json.dumps(s, default=str))
    assert s["reward"] == {"first_mean": pytest.approx(0.275), "last_mean": pytest.approx(0.775), "window": 10}
    assert s["best_checkpoint"]["step"] == 20 and s["last"] == {"reward": 1.0, "loss": 0.5}
    assert s["report_command"] == f"rlft report {tmp_path}"
    labels = dict(summary_lines(s, tmp_path))
    assert labels["status"] == "finished at step 20 of 20" and labels["wall time"] == "12.3 s"
    assert labels["reward"] == "0.275 (first 10 steps) -> 0.775 (last 10 steps)"
    assert labels["eval reward"] == "0.1 (start) -> 0.8 (end)"
    from rich.console import Console

    buf = io.StringIO()
    print_summary(s, tmp_path, Console(file=buf, width=200))
    text = buf.getvalue()
    assert "rlft run summary" in text and "best checkpoint" in text and f"rlft report {tmp_path}" in text
    # a narrow terminal and a long path: the command a user copies stays on one line
    deep = tmp_path / ("a-long-folder-name-" * 6) / "run"
    buf = io.StringIO()
    print_summary({**s, "report_command": f"rlft report {deep}"}, deep, Console(file=buf, width=40))
    lines = buf.getvalue().splitlines()
    assert f"report: rlft report {deep}" in lines and f"run: {deep}" in lines


def test_run_numbers_without_metrics(tmp_path):
    nums = run_numbers(tmp_path)
    assert nums["headline"] is None and nums["best_checkpoint"] is None and "reward" not in nums
    s = write_summary(tmp_path / "summary.json", stage="dpo", status="failed", steps=0, wall_s=0.5, last={}, **nums)
    assert dict(summary_lines(s, tmp_path))["status"] == "failed at step 0"


def test_tracker_files_go_into_the_run_folder(tmp_path):
    from rlft.runtime import tracker_env

    assert tracker_env(["tensorboard", "wandb"], tmp_path, {}) == {
        "TENSORBOARD_LOGGING_DIR": str(tmp_path / "tensorboard"), "WANDB_DIR": str(tmp_path)}
    assert tracker_env(["tensorboard"], tmp_path, {"TENSORBOARD_LOGGING_DIR": "/elsewhere"}) == {}
    assert tracker_env([], tmp_path, {}) == {}
    # a later run in the same process (a pipeline) gets its own folder
    first = tracker_env(["tensorboard"], tmp_path / "a", {})
    assert tracker_env(["tensorboard"], tmp_path / "b",
                       first) == {"TENSORBOARD_LOGGING_DIR": str(tmp_path / "b" / "tensorboard")}


def test_async_numbers_over_the_run():
    from rlft.monitor.summary import async_numbers

    rows = [{"step": 1, "async/staleness_mean": 0.0, "async/staleness_max": 0.0, "async/dropped": 0.0},
            {"step": 2, "async/staleness_mean": 1.0, "async/staleness_max": 2.0, "async/dropped": 16.0,
             "async/overlap_frac": 0.5},
            {"step": 3, "async/staleness_mean": 2.0, "async/staleness_max": 2.0, "async/dropped": 8.0,
             "async/overlap_frac": 0.7}]
    assert async_numbers(rows) == {"staleness_mean": 1.0, "staleness_max": 2.0, "dropped": 24.0,
                                   "overlap_frac": pytest.approx(0.6)}
    assert async_numbers([{"step": 1, "reward": 0.5}]) is None
