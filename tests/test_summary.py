"""summary.json: status per exit code, the last training row of metrics.jsonl, atomic write."""

import json

from rlft.monitor.summary import last_metrics, status_for, write_summary


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
